"""What each output was built from: the build records a job writes beside its outputs, the check of what a
stage reads against them, and the jobs one parameter set's run can take from another's."""
