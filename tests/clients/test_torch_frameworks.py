"""remat in training frameworks with one line: ``enable(model, ...)`` plans the model in place, so the
Hugging Face Trainer (which reads the model's forward signature, ``config`` and loss settings) trains it as
it trains the model itself: the same losses, gradients and parameters, with gradient accumulation, and the
step planned within the budget. Small models from their configs, random weights, nothing downloaded."""

from __future__ import annotations

import copy
import inspect
import pickle

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

from remat.clients.torch import activation_peak, backend, disable, enable, planned  # noqa: E402
from remat.schedules import InvalidRequest  # noqa: E402

pytestmark = pytest.mark.torch

VOCAB = 128
LENGTH = 32


def _gpt2() -> torch.nn.Module:
    """A small GPT-2 without dropout (so that the runs compared draw nothing), in training mode."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).train()


class _Texts(torch.utils.data.Dataset):
    """Token sequences as a tokenizer gives them, labels with a masked prefix of varying length (so that each
    step averages its loss over another number of tokens), and a column the model does not take."""

    def __init__(self, n: int, seed: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, object]:
        labels = self.ids[i].clone()
        labels[: (i % 5) * 3] = -100
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": labels,
                "source": f"doc-{i}"}


class _Record(transformers.TrainerCallback):
    """The gradients of each optimizer step, as the optimizer gets them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.gradients: list[dict[str, torch.Tensor]] = []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self.gradients.append({n: p.grad.clone() for n, p in self.model.named_parameters()})


def _train(model: torch.nn.Module, out: str) -> tuple[list[torch.Tensor], _Record, dict[str, float]]:
    """Three optimizer steps of two micro-batches each with the Trainer as people set it up, then an evaluation:
    the loss of every training call, the gradients of each step and the evaluation's metrics."""
    args = transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3,
        learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True, seed=0, save_strategy="no",
        per_device_eval_batch_size=4)
    losses: list[torch.Tensor] = []
    hook = model.register_forward_hook(lambda m, i, o: losses.append(o.loss.detach().clone()) if m.training else None)
    record = _Record(model)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Texts(12, seed=1),
                                   eval_dataset=_Texts(8, seed=2), callbacks=[record])
    trainer.train()
    metrics = trainer.evaluate()
    hook.remove()
    return losses, record, metrics


@pytest.mark.slow
def test_the_trainer_trains_an_enabled_model_as_it_trains_the_model(tmp_path):
    ref = _gpt2()
    losses_ref, record_ref, metrics_ref = _train(ref, str(tmp_path / "ref"))

    model = _gpt2()
    assert enable(model, activation_budget=0.7) is model  # the one line: Trainer(model=enable(model, ...))
    losses, record, metrics = _train(model, str(tmp_path / "remat"))

    # the same losses, to the bit, for every micro-batch (each averaged over the tokens of its optimizer step,
    # num_items_in_batch, which the Trainer passes because the forward still takes **kwargs)
    assert len(losses) == len(losses_ref) == 6
    for i, (loss, expected) in enumerate(zip(losses, losses_ref, strict=True)):
        assert torch.equal(loss, expected), f"micro-batch {i}: {loss.item()} against {expected.item()}"
    for step, (grads, grads_ref) in enumerate(zip(record.gradients, record_ref.gradients, strict=True)):
        for name, g in grads.items():
            assert torch.equal(g, grads_ref[name]), f"step {step}: gradient of {name}"
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), f"parameter {name} after training"
    assert metrics["eval_loss"] == metrics_ref["eval_loss"]

    # planned on the first call of each kind (a step that starts without gradients, one that adds into them),
    # within the budget, and not again as num_items_in_batch changed, nor for the evaluation (the model's own
    # forward under no_grad)
    plans = planned(model).plans
    assert len(plans) == 2
    assert [p.joint.fixed.get("gradients", 0) > 0 for p in plans] == [False, True]
    for p in plans:
        assert p.simulation.recomputations > 0 and p.simulation.peak_memory <= p.budget


def test_enable_keeps_the_model_and_plans_its_training_calls_only():
    model = _gpt2()
    signature = inspect.signature(model.forward)
    keys = list(model.state_dict())
    config, loss_type = model.config, model.loss_type
    batch = {"input_ids": torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(3))}
    batch["labels"] = batch["input_ids"]

    enable(model, activation_budget=0.7)
    assert type(model) is transformers.GPT2LMHeadModel and model.config is config and model.loss_type == loss_type
    assert inspect.signature(model.forward) == signature and model.forward.__name__ == "forward"
    assert list(model.state_dict()) == keys and [n for n, _ in model.named_modules()][:2] == ["", "transformer"]
    with pytest.raises(InvalidRequest, match="already enabled"):
        enable(model, budget="1GiB")

    # evaluation and inference: the model's own forward, nothing captured or planned
    ref = _gpt2()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, ref(**batch).logits)
    model.eval()
    assert torch.equal(model(**batch).loss, ref.eval()(**batch).loss)
    assert planned(model).plans == ()

    model.train()
    ref.train()
    loss = model(**batch).loss
    loss.backward()
    assert len(planned(model).plans) == 1
    ref(**batch).loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), f"gradient of {name}"

    assert disable(model) is model and "forward" not in vars(model)
    with pytest.raises(InvalidRequest, match="not enabled"):
        planned(model)


def test_a_count_given_as_a_number_each_step_is_planned_once_and_held_to_the_plan():
    """A loss averaged over a count the loop passes as a Python int, another each step (as the Trainer's
    num_items_in_batch is): one plan, the same losses and gradients, and the step within its plan's peak."""
    model, ref = enable(_gpt2(), activation_budget=0.7), _gpt2()
    ids = torch.randint(0, VOCAB, (5, 2, LENGTH), generator=torch.Generator().manual_seed(4))
    for step, count in enumerate([50, 61, 37, 44, 58]):
        batch = {"input_ids": ids[step], "labels": ids[step], "num_items_in_batch": count}
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        loss, expected = model(**batch).loss, ref(**batch).loss
        loss.backward()
        expected.backward()
        assert torch.equal(loss, expected), f"step {step}"
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), f"step {step}: gradient of {name}"
    plans = planned(model).plans
    assert len(plans) == 1

    model.zero_grad(set_to_none=True)
    peak = activation_peak(lambda: model(**batch).loss.backward(), model.parameters())
    assert plans[0].joint.resident_memory + peak <= plans[0].simulation.peak_memory <= plans[0].budget


def test_a_copy_of_an_enabled_model_plans_on_its_own_and_pickling_says_what_to_do():
    model = enable(_gpt2(), activation_budget=0.7)
    batch = {"input_ids": torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(5))}
    batch["labels"] = batch["input_ids"]
    model(**batch).loss.backward()

    twin = copy.deepcopy(model)  # as a reference model or an EMA copy is made
    assert planned(twin) is not planned(model) and planned(twin).plans == ()
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    twin.zero_grad(set_to_none=True)
    twin(**batch).loss.backward()  # runs the copy's parameters, through a plan of its own
    assert len(planned(twin).plans) == 1 and len(planned(model).plans) == 1
    ref = _gpt2()
    with torch.no_grad():
        for p in ref.parameters():
            p.mul_(0.5)
    ref(**batch).loss.backward()
    for (name, p), q in zip(twin.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), f"gradient of {name}"

    with pytest.raises(TypeError, match=r"state_dict\(\)"):
        pickle.dumps(model)


def _accelerate_losses(remat: bool) -> tuple[list[float], torch.nn.Module]:
    """Eight micro-batches through accelerate's loop, two accumulated per optimizer step, under bf16 autocast."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # one Accelerator per process, as a script has
    accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    model = enable(_gpt2(), activation_budget=0.7) if remat else _gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (8, 2, LENGTH), generator=torch.Generator().manual_seed(6))
    loader = torch.utils.data.DataLoader([{"input_ids": i, "labels": i} for i in ids], batch_size=None)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    AcceleratorState._reset_state(reset_partial_state=True)
    return losses, model


def test_accelerate_trains_an_enabled_model_as_it_trains_the_model():
    expected, ref = _accelerate_losses(remat=False)
    losses, model = _accelerate_losses(remat=True)
    assert losses == expected
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert len(planned(model).plans) == 2  # a step from no gradients, and one adding into them


def _lightning_fit(remat: bool) -> tuple[object, object]:
    """Three optimizer steps of two micro-batches each with Lightning's Trainer, the GPT-2 inside a
    LightningModule (planned in ``configure_model`` when ``remat``), and a validation: the module and the trainer."""
    pl = pytest.importorskip("pytorch_lightning")

    class Language(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _gpt2()
            self.losses: list[torch.Tensor] = []

        def configure_model(self) -> None:
            if remat:
                enable(self.model, activation_budget=0.7)  # the one line

        def training_step(self, batch, index):  # noqa: ANN001, ANN201
            loss = self.model(**batch).loss
            self.losses.append(loss.detach().clone())
            return loss

        def validation_step(self, batch, index):  # noqa: ANN001, ANN201
            self.log("val_loss", self.model(**batch).loss)

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    ids = torch.randint(0, VOCAB, (12, LENGTH), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": x, "labels": x} for x in ids]
    pl.seed_everything(0, verbose=False)
    module = Language()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=3, accumulate_grad_batches=2, limit_val_batches=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    loader = torch.utils.data.DataLoader
    trainer.fit(module, loader(data, batch_size=2), loader(data, batch_size=4))
    return module, trainer


@pytest.mark.slow
def test_lightning_trains_a_module_whose_model_is_enabled_as_it_trains_it():
    ref, trainer_ref = _lightning_fit(remat=False)
    module, trainer = _lightning_fit(remat=True)
    assert len(module.losses) == len(ref.losses) == 6
    for i, (loss, expected) in enumerate(zip(module.losses, ref.losses, strict=True)):
        assert torch.equal(loss, expected), f"micro-batch {i}: {loss.item()} against {expected.item()}"
    for (name, p), q in zip(module.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), f"parameter {name} after training"
    assert torch.equal(trainer.callback_metrics["val_loss"], trainer_ref.callback_metrics["val_loss"])
    plans = planned(module.model).plans
    assert len(plans) == 2 and all(p.simulation.peak_memory <= p.budget for p in plans)


class _Scaled(torch.nn.Module):
    """A loss over a count the loop passes (as the Trainer's num_items_in_batch), first or last."""

    def __init__(self, count_first: bool) -> None:
        super().__init__()
        self.count_first = count_first
        self.layers = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        count, x = (a, b) if self.count_first else (b, a)
        return self.layers(x).square().sum() / count


@pytest.mark.parametrize("count_first", [True, False])
def test_torch_compile_warns_of_a_step_adding_into_gradients_its_plan_did_not_count(count_first):
    torch.manual_seed(0)
    model = _Scaled(count_first)
    compiled = torch.compile(model, backend=backend(activation_budget=1.0, strategy="checkpoint-all"),
                             fullgraph=True, dynamic=False)
    x, count = torch.randn(8, 16), torch.tensor(40.0)
    args = (count, x) if count_first else (x, count)
    compiled(*args).backward()  # planned for a step that starts without gradients
    with pytest.warns(ResourceWarning, match="adds into gradients the parameters already hold"):
        compiled(*args).backward()
