"""The networks: the looped (recurrent-depth) GPT."""
