"""The looped GPT against an independent, hand-written forward pass: layout, loop semantics, trajectories,
causality and truncated backprop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from twoscale.models.looped_gpt import (
    DepthPosition,
    LoopedGPT,
    ModelConfig,
    Segment,
    matmul_attention,
    segments,
)

torch.set_num_threads(1)

DEFAULT_GROUPS = ((1, 1), (2, 3), (4, 4))  # the default layout of a 6-layer model


def config(
    n_layer: int = 6, groups=DEFAULT_GROUPS, block_size: int = 12, vocab_size: int = 37
) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size, n_layer=n_layer, n_head=2, n_embd=16, block_size=block_size,
        dropout=0.0, bias=True, groups=groups,
    )


def make_model(cfg: ModelConfig | None = None, seed: int = 0) -> LoopedGPT:
    torch.manual_seed(seed)
    return LoopedGPT(cfg or config()).double().eval()


def tokens(batch: int = 2, length: int = 10, vocab: int = 37, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# --- independent route: run the blocks by hand from a written-out plan ------------------------------------


def manual_embed(model: LoopedGPT, idx: torch.Tensor) -> torch.Tensor:
    return model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))


def run_layers(model: LoopedGPT, x: torch.Tensor, layers: list[int], times: int) -> torch.Tensor:
    for _ in range(times):
        for layer in layers:
            x = model.blocks[layer](x)
    return x


def manual_forward(model: LoopedGPT, idx: torch.Tensor, plan: list[tuple[list[int], int]]) -> torch.Tensor:
    """plan: (layers, how many times to run them in order), from the first layer to the last."""
    x = manual_embed(model, idx)
    for layers, times in plan:
        x = run_layers(model, x, layers, times)
    return model.lm_head(model.ln_f(x))


def default_plan(k0: int, k1: int, k2: int) -> list[tuple[list[int], int]]:
    # layer 0 -> (layer 1) x k0 -> (layers 2,3) x k1 -> (layer 4) x k2 -> layer 5
    return [([0], 1), ([1], k0), ([2, 3], k1), ([4], k2), ([5], 1)]


# --- layout -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_layer", "groups", "expected"),
    [
        (6, DEFAULT_GROUPS,
         [Segment((0,), None), Segment((1,), 0), Segment((2, 3), 1), Segment((4,), 2), Segment((5,), None)]),
        (3, ((0, 0),), [Segment((0,), 0), Segment((1, 2), None)]),  # group at layer 0
        (3, ((2, 2),), [Segment((0, 1), None), Segment((2,), 0)]),  # group at the last layer
        (4, ((0, 1), (2, 3)), [Segment((0, 1), 0), Segment((2, 3), 1)]),  # adjacent groups, nothing else
        (5, ((1, 1), (2, 2)),
         [Segment((0,), None), Segment((1,), 0), Segment((2,), 1), Segment((3, 4), None)]),
        (2, ((0, 1),), [Segment((0, 1), 0)]),  # one group is the whole model
        (7, ((2, 3), (6, 6)),
         [Segment((0, 1), None), Segment((2, 3), 0), Segment((4, 5), None), Segment((6,), 1)]),
    ],
)
def test_segments_split_depth_into_single_pass_runs_and_groups(n_layer, groups, expected):
    assert segments(config(n_layer=n_layer, groups=groups)) == expected


# --- loop semantics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("loops", [(1, 1, 1), (3, 1, 1), (1, 2, 1), (1, 1, 4), (2, 3, 2)])
def test_forward_equals_manual_unrolled_forward(loops):
    model, idx = make_model(), tokens()
    with torch.no_grad():
        expected = manual_forward(model, idx, default_plan(*loops))
        got = model(idx, loops).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_loop_counts_matter():
    model, idx = make_model(), tokens()
    with torch.no_grad():
        once, twice = model(idx, (1, 1, 1)).logits, model(idx, (1, 2, 1)).logits
    assert (once - twice).abs().max() > 1e-4


@pytest.mark.parametrize(
    ("n_layer", "groups", "loops", "plan"),
    [
        (3, ((0, 0), (2, 2)), (2, 3), [([0], 2), ([1], 1), ([2], 3)]),  # groups at both ends
        (4, ((0, 1), (2, 3)), (3, 2), [([0, 1], 3), ([2, 3], 2)]),  # adjacent multi-layer groups
    ],
)
def test_edge_layouts_equal_manual_forward(n_layer, groups, loops, plan):
    model, idx = make_model(config(n_layer=n_layer, groups=groups)), tokens()
    with torch.no_grad():
        expected = manual_forward(model, idx, plan)
        torch.testing.assert_close(model(idx, loops).logits, expected, rtol=0, atol=1e-12)


def test_loss_is_mean_next_token_cross_entropy():
    model, idx = make_model(), tokens(length=11)
    x, y = idx[:, :-1], idx[:, 1:]
    with torch.no_grad():
        out = model(x, (2, 1, 1), targets=y)
        logp = torch.log_softmax(manual_forward(model, x, default_plan(2, 1, 1)), dim=-1)
    expected = -logp.gather(-1, y.unsqueeze(-1)).mean()
    # the model computes the loss in float32 (for bf16 autocast), so float32 precision
    torch.testing.assert_close(out.loss.double(), expected, rtol=1e-6, atol=0)


# --- trajectories -----------------------------------------------------------------------------------------


def test_trajectories_hold_group_input_and_every_application():
    model, idx = make_model(), tokens(batch=3, length=7)
    loops = (3, 2, 4)
    with torch.no_grad():
        out = model(idx, loops, record_trajectories=True)
        plain = model(idx, loops).logits
        before_0 = run_layers(model, manual_embed(model, idx), [0], 1)
        expected_0 = [run_layers(model, before_0, [1], k) for k in range(4)]
        # group 1 follows group 0 directly: its input is group 0's last state
        expected_1 = [run_layers(model, expected_0[-1], [2, 3], k) for k in range(3)]
        expected_2 = [run_layers(model, expected_1[-1], [4], k) for k in range(5)]

    assert [tuple(t.shape) for t in out.trajectories] == [(4, 3, 7, 16), (3, 3, 7, 16), (5, 3, 7, 16)]
    for traj, expected in zip(out.trajectories, (expected_0, expected_1, expected_2)):
        for k, state in enumerate(expected):
            torch.testing.assert_close(traj[k], state, rtol=0, atol=1e-12)
    assert torch.equal(out.logits, plain)


def test_trajectory_input_includes_single_pass_layers_before_the_group():
    model, idx = make_model(config(n_layer=5, groups=((2, 2),))), tokens()
    with torch.no_grad():
        traj = model(idx, (2,), record_trajectories=True).trajectories[0]
        expected_input = run_layers(model, manual_embed(model, idx), [0, 1], 1)
    torch.testing.assert_close(traj[0], expected_input, rtol=0, atol=1e-12)


def test_nothing_recorded_unless_asked():
    model = make_model()
    with torch.no_grad():
        assert model(tokens(), (2, 2, 2)).trajectories == []


def test_depth_states_are_the_state_after_every_layer_run():
    model, idx, (k0, k1, k2) = make_model(), tokens(), (3, 2, 2)
    with torch.no_grad():
        out = model(idx, (k0, k1, k2), record_trajectories=True)
        expected, x = [manual_embed(model, idx)], manual_embed(model, idx)
        for layers, times in default_plan(k0, k1, k2):
            for _ in range(times):
                for layer in layers:
                    x = model.blocks[layer](x)
                    expected.append(x)
    assert len(out.depth_states) == 1 + 1 + 3 + 2 * 2 + 2 + 1
    for got, want in zip(out.depth_states, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert out.depth_positions[:3] == [DepthPosition(None), DepthPosition(0), DepthPosition(1, 0, 1)]
    assert out.depth_positions[5:9] == [
        DepthPosition(2, 1, 1), DepthPosition(3, 1, 1), DepthPosition(2, 1, 2), DepthPosition(3, 1, 2)
    ]
    assert out.depth_positions[-1] == DepthPosition(5)
    assert model(idx, (k0, k1, k2)).depth_states == []
    with torch.no_grad():  # the same states without the head
        for got, want in zip(model.depth_states(idx, (k0, k1, k2)), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="one loop count"):
        model.depth_states(idx, (k0, k1))


# --- causality --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loops", [(1, 1, 1), (4, 2, 3)])
@pytest.mark.parametrize("t", [0, 4, 9])
def test_changing_a_token_changes_no_earlier_logit(loops, t):
    model, idx = make_model(), tokens(batch=1, length=10)
    changed = idx.clone()
    changed[0, t] = (idx[0, t] + 1) % 37
    with torch.no_grad():
        a, b = model(idx, loops).logits, model(changed, loops).logits
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-12)
    assert (a[:, t] - b[:, t]).abs().max() > 1e-6


# --- truncated backprop -----------------------------------------------------------------------------------


def grads(params) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in params]


def test_truncated_backprop_loss_matches_full_graph_and_group_gradient_matches_manual_truncation():
    # layer 0 -> (layers 1,2) x 5 -> layer 3, gradients through the last 2 applications only
    model = make_model(config(n_layer=4, groups=((1, 2),)))
    idx = tokens(length=11)
    x, y = idx[:, :-1], idx[:, 1:]
    group = list(model.blocks[1].parameters()) + list(model.blocks[2].parameters())

    full = model(x, (5,), targets=y)
    full.loss.backward()
    full_grads = grads(group)
    model.zero_grad(set_to_none=True)

    truncated = model(x, (5,), targets=y, backprop_depth=2)
    truncated.loss.backward()
    assert truncated.loss.item() == pytest.approx(full.loss.item(), abs=1e-12)
    # the detach before the group cuts every layer before it (no input injection)
    assert all(p.grad is None or not p.grad.any() for p in [*model.blocks[0].parameters(), model.wpe.weight])
    got = grads(group)
    model.zero_grad(set_to_none=True)

    with torch.no_grad():
        h = run_layers(model, manual_embed(model, x), [0], 1)
        h = run_layers(model, h, [1, 2], 3)
    h = run_layers(model, h.detach(), [1, 2], 2)
    logits = model.lm_head(model.ln_f(run_layers(model, h, [3], 1)))
    F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    for g, expected in zip(got, grads(group)):  # float32 loss: float32 precision
        torch.testing.assert_close(g, expected, rtol=1e-5, atol=1e-9)
    # and truncation did change the gradient
    assert any(not torch.allclose(g, f, rtol=1e-3) for g, f in zip(got, full_grads))


@pytest.mark.parametrize(
    ("loops", "cut"),
    [
        ((5, 1), [0]),  # group 0 (layer 1) loops past the depth: layer 0 is cut off
        ((1, 5), [0, 1]),  # group 1 (layer 2) loops past the depth: layers 0 and 1 (group 0) are cut off
        ((2, 2), []),  # nothing exceeds the depth: every layer learns
    ],
)
@pytest.mark.parametrize("straight_through", [False, True])
def test_layers_before_a_truncated_group_get_no_gradient_unless_passed_straight_through(
    loops, cut, straight_through
):
    model = make_model(config(n_layer=4, groups=((1, 1), (2, 2))))
    idx = tokens(length=9)
    model(idx[:, :-1], loops, targets=idx[:, 1:], backprop_depth=2, straight_through=straight_through
          ).loss.backward()
    for layer in range(4):
        has_grad = any(p.grad is not None and p.grad.any() for p in model.blocks[layer].parameters())
        assert has_grad == (straight_through or layer not in cut), f"layer {layer}"


def test_straight_through_gradient_treats_the_skipped_steps_as_a_constant_offset():
    # layer 0 -> (layers 1,2) x 5 -> layer 3, gradients through the last 2 applications; the first 3 add an
    # offset whose derivative is taken as zero, so d x^(3) / d x^(0) = I
    model = make_model(config(n_layer=4, groups=((1, 2),)))
    idx = tokens(length=11)
    x, y = idx[:, :-1], idx[:, 1:]
    out = model(x, (5,), targets=y, backprop_depth=2, straight_through=True)
    out.loss.backward()
    got = grads(model.parameters())
    model.zero_grad(set_to_none=True)

    h = run_layers(model, manual_embed(model, x), [0], 1)
    with torch.no_grad():
        offset = run_layers(model, h, [1, 2], 3) - h
    h = run_layers(model, h + offset, [1, 2], 2)
    logits = model.lm_head(model.ln_f(run_layers(model, h, [3], 1)))
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    assert out.loss.item() == pytest.approx(loss.item(), rel=1e-6)  # the model's loss is float32
    for g, expected in zip(got, grads(model.parameters())):
        torch.testing.assert_close(g, expected, rtol=1e-5, atol=1e-9)


# --- bad input and structure ------------------------------------------------------------------------------


@pytest.mark.parametrize("loops", [(1, 1), (1, 1, 1, 1), (), (1, 0, 1), (-1, 2, 2)])
def test_bad_loop_counts_raise(loops):
    with pytest.raises(ValueError, match="loop count"):
        make_model()(tokens(), loops)


def test_sequence_longer_than_block_size_raises():
    model = make_model()  # block_size 12
    with torch.no_grad():
        assert model(tokens(length=12), (1, 1, 1)).logits.shape == (2, 12, 37)
        with pytest.raises(ValueError, match="longer than block_size 12"):
            model(tokens(length=13), (1, 1, 1))


def test_token_embedding_and_lm_head_share_one_weight():
    model = make_model()
    assert model.wte.weight is model.lm_head.weight
    assert model.wte.weight.data_ptr() == model.lm_head.weight.data_ptr()
    # 37*16 shared + 12*16 positions + 6 blocks + final norm, counted once
    block = 2 * 2 * 16 + (16 * 48 + 48) + (16 * 16 + 16) + (16 * 64 + 64) + (64 * 16 + 16)
    assert model.num_parameters() == 37 * 16 + 12 * 16 + 6 * block + 2 * 16


def test_scaled_embedding_multiplies_the_token_part_by_the_root_of_the_width():
    plain = make_model()
    scaled = LoopedGPT(ModelConfig(**{**plain.config.to_dict(), "groups": DEFAULT_GROUPS,
                                      "scale_embedding": True})).double().eval()
    scaled.load_state_dict(plain.state_dict())
    idx = tokens()
    expected = 4.0 * plain.wte(idx) + plain.wpe(torch.arange(idx.shape[1]))  # sqrt(16) = 4
    torch.testing.assert_close(scaled.embed(idx), expected)
    torch.testing.assert_close(plain.embed(idx[:, 3:5], start=3), manual_embed(plain, idx)[:, 3:5])


# --- mixed precision ----------------------------------------------------------------------------------------


def test_matmul_attention_is_causal_softmax_attention():
    q, k, v = torch.randn(3, 2, 2, 7, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(matmul_attention(q, k, v), expected)
    # position 0 attends to itself alone: its output is its own value
    torch.testing.assert_close(matmul_attention(q, k, v)[:, :, 0], v[:, :, 0])


@pytest.mark.parametrize(("norm", "injection"), [("pre", "none"), ("sandwich", "adapter")])
def test_bf16_autocast_keeps_the_state_and_logits_in_float32_and_close(norm, injection):
    torch.manual_seed(0)
    model = LoopedGPT(ModelConfig(**{**config().to_dict(), "groups": DEFAULT_GROUPS, "norm": norm,
                                     "injection": injection}))
    idx = tokens()
    reference = model(idx, (3, 2, 3)).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(idx, (3, 2, 3), record_trajectories=True)
    assert mixed.logits.dtype == torch.float32
    assert {state.dtype for state in mixed.depth_states} == {torch.float32}  # only matmuls run in bf16
    assert (mixed.logits - reference).abs().max() < 0.05 * reference.abs().max()


# --- sandwich norm and input injection ---------------------------------------------------------------------


def test_sandwich_block_normalises_each_residual_sum():
    model = make_model(ModelConfig(**{**config().__dict__, "norm": "sandwich"}))
    block, x = model.blocks[2], torch.randn(2, 5, 16, dtype=torch.float64)
    ln = lambda norm, v: F.layer_norm(v, (16,), norm.weight, norm.bias)  # noqa: E731
    after_attention = ln(block.ln_attn_out, x + block.attn(ln(block.ln_1, x)))
    expected = ln(block.ln_mlp_out, after_attention + block.mlp(ln(block.ln_2, after_attention)))
    torch.testing.assert_close(block(x), expected, rtol=0, atol=1e-12)


def injected_model(injection: str, norm: str = "pre") -> LoopedGPT:
    model = make_model(ModelConfig(**{**config().__dict__, "injection": injection, "norm": norm}))
    with torch.no_grad():
        for step in model.group_steps:
            if injection != "none":
                step.inject.weight.add_(0.3 * torch.randn_like(step.inject.weight))
            if norm == "group":
                step.out_norm.weight.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize(
    "injection, norm", [("add", "pre"), ("adapter", "pre"), ("none", "group"), ("add", "group"), ("none", "rescale")]
)
def test_group_steps_read_the_group_input_and_normalise_their_output_as_written(injection, norm):
    model = injected_model(injection, norm)
    idx, (k0, k1, k2) = tokens(), (2, 3, 1)
    x = run_layers(model, manual_embed(model, idx), [0], 1)
    for group, (layers, times) in enumerate((([1], k0), ([2, 3], k1), ([4], k2))):
        group_input, step = x, model.group_steps[group]
        for _ in range(times):
            if injection == "add":
                x = x + group_input @ step.inject.weight.T
            elif injection == "adapter":
                x = torch.cat([x, group_input], -1) @ step.inject.weight.T + step.inject.bias
            x = run_layers(model, x, layers, 1)
            if norm == "group":
                x = F.layer_norm(x, (16,), step.out_norm.weight, step.out_norm.bias)
            elif norm == "rescale":
                x = x / x.norm(dim=-1, keepdim=True) * group_input.norm(dim=-1, keepdim=True)
    expected = model.lm_head(model.ln_f(run_layers(model, x, [5], 1)))
    torch.testing.assert_close(model(idx, [k0, k1, k2]).logits, expected, rtol=0, atol=1e-10)
    recorded = model(idx, [k0, k1, k2], record_trajectories=True)
    torch.testing.assert_close(recorded.logits, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(recorded.trajectories[1][-1], recorded.depth_states[1 + k0 + 2 * k1])


@pytest.mark.parametrize("injection", ["add", "adapter"])
def test_fresh_injection_ignores_the_group_input_so_training_starts_from_the_plain_model(injection):
    plain = make_model()
    injected = make_model(ModelConfig(**{**config().__dict__, "injection": injection}))
    fresh_steps = {k: v for k, v in injected.state_dict().items() if k.startswith("group_steps.")}
    injected.load_state_dict({**plain.state_dict(), **fresh_steps})
    idx = tokens()
    torch.testing.assert_close(injected(idx, [3, 2, 4]).logits, plain(idx, [3, 2, 4]).logits, rtol=0, atol=1e-12)


def test_rescaled_groups_keep_every_state_at_the_norm_of_the_group_input():
    model = make_model(ModelConfig(**{**config().__dict__, "norm": "rescale"}))
    for trajectory in model(tokens(), [6, 6, 6], record_trajectories=True).trajectories:
        norms = trajectory.norm(dim=-1)
        torch.testing.assert_close(norms, norms[:1].expand_as(norms))


def test_the_model_s_choices_are_the_parameters_choices():
    """The model file stands alone (it imports nothing of the package), so the parameters' schema writes the norms
    and injections again: the two lists are the same."""
    from typing import get_args

    from twoscale.config.params import ModelParams
    from twoscale.models.looped_gpt import Injection, Norm

    assert get_args(Norm) == get_args(ModelParams.model_fields["norm"].annotation)
    assert get_args(Injection) == get_args(ModelParams.model_fields["injection"].annotation)
