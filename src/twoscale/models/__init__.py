"""The looped (recurrent-depth) GPT: one file that imports torch and nothing of the pipeline."""
