"""The block-recurrent (Raptor) surrogates system: the surrogate model, its two-stage distillation from a plain
GPT teacher, its recovery and depth dynamics, its figures, verdicts and claims (C8)."""
