"""Device only: the static-buffer decoding replayed from CUDA graphs against the engine on a tiny float64 model."""
import importlib.util
import sys

import torch

sys.path.insert(0, "tests")
from conftest import tiny_model  # noqa: E402

spec = importlib.util.spec_from_file_location("graphed_tests", "tests/decoding/test_graphed.py")
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
model = tiny_model.__wrapped__().cuda() if hasattr(tiny_model, "__wrapped__") else None
if model is None:
    from twoscale.models.looped_gpt import LoopedGPT, ModelConfig
    torch.manual_seed(0)
    model = LoopedGPT(ModelConfig(vocab_size=40, n_layer=6, n_head=2, n_embd=16, block_size=16, dropout=0.0,
                                  bias=True, groups=((1, 1), (2, 3), (4, 4)))).double().eval().cuda()
for name in [*tests.RULE_SETS, *tests.OTHER_MODELS_RULE_SETS]:
    for read_every in (1, 3):
        loops = tests.assert_same_decoding(model, name, read_every)
        print(name, read_every, "same on cuda; depths", sorted({n for c in loops for n in c}), flush=True)
print("cuda check passed")
