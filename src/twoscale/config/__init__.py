"""What every module of the package may import, at the bottom of its layers: the parameters (params: the typed
schema and the files it reads), file IO (outputs that land together), errors and progress."""
