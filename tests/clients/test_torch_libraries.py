"""Models as they come from transformers and diffusers (built from their configs, random weights, no
downloads) and a LoRA adapter on one from PEFT, trained with the loop their users write: default attention (SDPA),
a padding mask, caches on, ``loss = model(**batch).loss`` or a loss computed outside; through rematerialize() and
through torch.compile with remat's backend, run op for op or compiled by Inductor."""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

import torch.nn.functional as F  # noqa: E402

from remat.clients.torch import activation_peak, allocator_peak, backend, rematerialize  # noqa: E402

pytestmark = pytest.mark.torch

VOCAB = 128


def _text_model(name: str) -> torch.nn.Module:
    """A small model of the family from its config, in training mode; everything else at its default."""
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64)
        model = transformers.GPT2LMHeadModel(config)
    elif name == "llama":
        config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                         num_attention_heads=4, vocab_size=VOCAB)
        model = transformers.BertForMaskedLM(config)
    assert model.config._attn_implementation == "sdpa"
    return model.train()


def _batch(batch: int = 4, length: int = 64) -> dict[str, torch.Tensor]:
    """Token ids with a padding mask (the second sequence padded) and labels, as a tokenizer and collator give."""
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1:, length * 2 // 3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


def _step(model, batch) -> torch.Tensor:
    loss = model(**batch).loss
    loss.backward()
    return loss


def _check_equal_training(model, ref, run, steps: int = 2) -> None:
    """``steps`` optimizer steps of ``run(model)`` and ``run(ref)`` from the same seed: same losses and gradients."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        opt_ref.zero_grad(set_to_none=True)
        torch.manual_seed(step)
        loss = run(model)
        torch.manual_seed(step)
        expected = run(ref)
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=f"gradient of {name}")
        opt.step()
        opt_ref.step()


def _trains_within_its_plan(model: Any) -> Any:
    """``model`` rematerialized at half its activations: a plan that recomputes, training as the model does without
    remat, and the step within the plan by the dispatcher's and the allocator's counts (dropout's noise included)."""
    ref = copy.deepcopy(model)
    batch = _batch()
    rm = rematerialize(model, batch, activation_budget=0.5)
    planned = rm.plans[0]
    assert planned.simulation.recomputations > 0 and planned.simulation.peak_memory <= planned.budget

    _check_equal_training(rm, ref, lambda m: _step(m, batch))

    model.zero_grad(set_to_none=True)
    peak = activation_peak(lambda: _step(rm, batch), model.parameters())
    assert planned.joint.resident_memory + peak <= planned.simulation.peak_memory <= planned.budget
    model.zero_grad(set_to_none=True)
    by_allocator = allocator_peak(lambda: _step(rm, batch))
    assert planned.joint.resident_memory + by_allocator <= planned.simulation.peak_memory
    return rm


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_a_text_model_trains_with_its_loop_unchanged_within_the_budget(name):
    model = _text_model(name)
    assert model.config.use_cache is not False
    _trains_within_its_plan(model)


def test_a_lora_adapter_from_peft_trains_as_without_remat_within_the_budget():
    """PEFT's LoRA on a Llama, its dropout on: the base model frozen, only the adapter's parameters get gradients,
    those PEFT gives without remat, and the step holds its plan, by the allocator's count too."""
    peft = pytest.importorskip("peft")
    adapter = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, target_modules=["q_proj", "v_proj"],
                              task_type="CAUSAL_LM")
    model = peft.get_peft_model(_text_model("llama"), adapter)
    rm = _trains_within_its_plan(model)
    trained = [name for name, p in rm.named_parameters() if p.grad is not None]
    assert trained == [name for name, p in model.named_parameters() if p.requires_grad]
    assert trained and all(".lora_A." in name or ".lora_B." in name for name in trained)
    assert len(rm.plans) == 1  # the adapter's step is one graph, planned once


def test_a_convnet_holds_its_plan_by_the_allocators_count_its_convolutions_workspaces_included():
    """transformers' ConvNeXt: its depthwise convolutions' backward allocates several times the step's
    activations inside the op on the CPU, which only the allocator sees; the plan holds it."""
    torch.manual_seed(0)
    config = transformers.ConvNextConfig(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                         image_size=32, num_labels=10)
    model = transformers.ConvNextForImageClassification(config).train()
    batch = {"pixel_values": torch.randn(4, 3, 32, 32), "labels": torch.randint(0, 10, (4,))}
    rm = rematerialize(model, batch, activation_budget=0.95)
    for _ in range(2):  # the first step sets config.problem_type, so the second compiles the step again
        _step(rm, batch)
        model.zero_grad(set_to_none=True)
    by_allocator = allocator_peak(lambda: _step(rm, batch))
    planned = rm.plans[-1]
    assert any(p.op == "workspace of aten.convolution_backward.default" for p in planned.joint.producers)
    assert planned.joint.resident_memory + by_allocator <= planned.simulation.peak_memory <= planned.budget


def _unet(text: tuple[int, int], head: int) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], torch.Tensor]:
    """A small diffusers UNet (``text`` tokens of the given width, attention heads of ``head``), its inputs
    (latents, timesteps, text) for a batch of 4 and the noise its loss compares with."""
    torch.manual_seed(0)
    unet = diffusers.UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        norm_num_groups=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=text[1], attention_head_dim=head)
    inputs = (torch.randn(4, 4, 16, 16), torch.tensor([3, 700, 20, 400]), torch.randn(4, *text))
    return unet.train(), inputs, torch.randn(4, 4, 16, 16)


def test_a_diffusion_unet_trains_with_its_loss_computed_outside():
    unet, (latents, timesteps, text), noise = _unet((5, 16), 4)
    ref = copy.deepcopy(unet)
    rm = rematerialize(unet, (latents, timesteps, text), activation_budget=0.5)
    assert rm.simulation.recomputations > 0

    def run(m):
        loss = F.mse_loss(m(latents, timesteps, text).sample, noise)
        loss.backward()
        return loss

    _check_equal_training(rm, ref, run)
    unet.zero_grad(set_to_none=True)
    peak = activation_peak(lambda: run(rm), unet.parameters())
    assert rm.plans[0].joint.resident_memory + peak <= rm.simulation.peak_memory <= rm.plans[0].budget


def test_torch_compile_with_the_remat_backend_plans_each_shape():
    model = _text_model("llama")
    ref = copy.deepcopy(model)
    remat = backend(activation_budget=0.5)
    compiled = torch.compile(model, backend=remat, fullgraph=True, dynamic=False)
    _check_equal_training(compiled, ref, lambda m: _step(m, _batch()), steps=1)
    _check_equal_training(compiled, ref, lambda m: _step(m, _batch(length=24)), steps=1)
    assert len(remat.planned) == 2
    assert [p.graph.sha256 for p in remat.planned][0] != remat.planned[1].graph.sha256
    assert all(p.simulation.peak_memory <= p.budget for p in remat.planned)
    assert all(p.joint.fixed["tangents"] == 4 for p in remat.planned)  # from the loss, the one scalar output


def test_torch_compile_raises_remats_own_error():
    from remat.clients.torch import PlanRejected

    compiled = torch.compile(_text_model("llama"), backend=backend(budget="100KiB", cache=False), fullgraph=True,
                             dynamic=False)
    with pytest.raises(PlanRejected) as refused:
        _step(compiled, _batch())
    assert str(refused.value).startswith("Strategy 'checkmate' returned status 'infeasible' for a budget of 100.00 KiB"
                                         ". That is less than the step holds before it allocates anything")
    assert "TORCHDYNAMO" not in str(refused.value)


def test_inductor_keeps_the_plans_recomputations():
    from torch._inductor.utils import run_and_get_code

    model = _text_model("llama")  # no dropout: Inductor runs the plan as solved (see the training tests)
    ref = copy.deepcopy(model)
    batch = _batch()

    def plan_and_step():
        rm = rematerialize(model, batch, activation_budget=0.5, compiler="inductor")
        torch.manual_seed(0)
        return rm, _step(rm, batch)

    (rm, loss), code = run_and_get_code(plan_and_step)
    torch.manual_seed(0)
    expected = _step(ref, batch)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)

    planned = rm.plans[0]
    computes = Counter(planned.graph.nodes[v].meta["op"] for op, v in planned.plan.steps if op == "compute")
    matmuls = sum(n for op, n in computes.items() if op in ("aten.mm.default", "aten.addmm.default"))
    batched = computes["aten.bmm.default"]
    assert planned.simulation.recomputations > 0 and len(planned.graph.nodes) < sum(computes.values())
    kernels = "\n".join(code)
    assert len(re.findall(r"extern_kernels\.(?:mm|addmm)\(", kernels)) == matmuls
    assert len(re.findall(r"extern_kernels\.bmm\(", kernels)) == batched


def test_the_backward_starts_from_the_loss_by_default_and_the_other_outputs_refuse_a_gradient():
    model = _text_model("gpt2")
    ref = copy.deepcopy(model)
    batch = _batch()
    every_output = rematerialize(copy.deepcopy(model), batch, activation_budget=1.0, strategy="checkpoint-all",
                                 backward_from=None)
    rm = rematerialize(model, batch, activation_budget=0.4)
    assert rm.fixed["tangents"] == rm.fixed["outputs"] == 4  # the loss alone
    assert every_output.fixed["tangents"] > 4 * 64 * VOCAB * 4  # the logits' gradient, and the caches'
    assert rm.graph.min_feasible_budget < every_output.graph.min_feasible_budget
    out = rm(**batch)
    assert out.loss.requires_grad
    with pytest.raises(Exception, match="planned from its loss alone, so its other outputs come without gradient"):
        (out.loss + out.logits.mean()).backward()  # never a silently missing term in the gradients
    del out

    _check_equal_training(rm, ref, lambda m: _step(m, batch))
    model.zero_grad(set_to_none=True)
    peak = activation_peak(lambda: _step(rm, batch), model.parameters())
    planned = rm.plans[0]
    assert planned.joint.resident_memory + peak <= planned.simulation.peak_memory <= planned.budget

    with pytest.warns(ResourceWarning, match=r"outputs besides its loss \(.*\) were still held when the backward"):
        kept = rm(**batch)
        kept.loss.backward()
    unlabelled = {k: v for k, v in batch.items() if k != "labels"}
    with pytest.raises(Exception, match="backward_from='loss' names no tensor among the step's outputs"):
        rematerialize(_text_model("gpt2"), unlabelled, activation_budget=0.5, backward_from="loss")
    # without labels there is no loss: every output may carry a gradient, as the loop computes one outside
    logits_only = rematerialize(_text_model("gpt2"), unlabelled, activation_budget=1.0, strategy="checkpoint-all")
    assert logits_only.fixed["tangents"] == every_output.fixed["tangents"] - 4


def test_for_inductor_the_backward_is_given_only_what_it_reads():
    """Without the plan's frees, a value kept into the backward and freed there unread (the logits and key/value
    caches, dropped at the end of the forward) would be held by Inductor's backward to its end: it is not passed on."""
    from remat.clients.torch._lower import lower

    planned = rematerialize(_text_model("gpt2"), _batch(), activation_budget=0.5).plans[0]
    tangents = set(planned.joint.tangents)
    for frees in (True, False):
        fwd, bwd = lower(planned.joint, planned.graph, planned.plan, frees=frees, timing=planned.simulation.timing)
        saved = [n for n in bwd.graph.find_nodes(op="placeholder") if n.name not in tangents]
        unread = [n.name for n in saved if not n.users]
        returned = next(iter(fwd.graph.find_nodes(op="output"))).args[0]
        assert len(returned) == planned.joint.num_forward_outputs + len(saved)
        assert not unread if not frees else not any(n.startswith("saved_") for n in unread), unread
        if frees:  # with them, each value kept into the backward goes where the plan frees it
            assert any(n.users and all(u.target.__name__ == "release" for u in n.users) for n in saved)


def test_inductor_holds_about_what_the_plan_holds():
    """Inductor's kernels run in the plan's order: it no longer hoists the backward's recomputations to its start."""
    unet, (latents, timesteps, text), noise = _unet((77, 64), 8)
    ratios = {}
    for compiler in ("eager", "inductor"):
        model = copy.deepcopy(unet)
        rm = rematerialize(model, (latents, timesteps, text), activation_budget=0.5, strategy="linearized-greedy",
                           compiler=compiler)

        def step(rm=rm):
            F.mse_loss(rm(latents, timesteps, text).sample, noise).backward()

        step()
        model.zero_grad(set_to_none=True)
        planned = rm.plans[0]
        ratios[compiler] = activation_peak(step, model.parameters()) / (
            planned.simulation.peak_memory - planned.joint.resident_memory)
    assert ratios["eager"] <= 1 and ratios["inductor"] <= 1.1, ratios  # it held 1.4 times the plan before
