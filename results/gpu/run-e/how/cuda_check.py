"""Device only: the static-buffer decoding replayed from CUDA graphs against the engine on the tests' tiny float64
model, with the rules' arithmetic compiled (the default on a GPU) and, for one rule set, launched op by op."""
import importlib.util
import sys
import time

import torch

spec = importlib.util.spec_from_file_location("graphed_tests", "tests/decoding/test_graphed.py")
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
from twoscale.models.looped_gpt import LoopedGPT, ModelConfig  # noqa: E402

torch.manual_seed(0)
model = LoopedGPT(ModelConfig(vocab_size=40, n_layer=6, n_head=2, n_embd=16, block_size=16, dropout=0.0,
                              bias=True, groups=((1, 1), (2, 3), (4, 4)))).double().eval().to("cuda" if torch.cuda.is_available() else "cpu")
cases = [(name, 3, None) for name in tests.RULE_SETS] + [("mixed", 2, None), ("acceleration", 1, False)]
for name, read_every, fuse in cases:
    started = time.time()
    loops = tests.assert_same_decoding(model, name, read_every, fuse)
    print(name, "read every", read_every, "compiled" if fuse is None else "op by op", "same on cuda; depths",
          sorted({n for c in loops for n in c}), f"{time.time() - started:.1f} s", flush=True)
print(torch._dynamo.utils.counters["stats"])
print("cuda check passed")
