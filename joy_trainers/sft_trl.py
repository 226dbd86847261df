"""TRL's side of the ``sft`` trainer (:mod:`joy_trainers.sft`): the trainer class (the completion-only loss,
fixed batches, each role's adapter in its checkpoints, a full disk at a checkpoint in one line), its arguments per
stage, and the callback that shows a stage's progress and appends TRL's logs to ``metrics.jsonl``."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from joy_trainers.distributed import is_main
from joy_trainers.rundir import writing, wrote
from joy_trainers.sft_loss import completion_loss

if TYPE_CHECKING:
    from joy_trainers.sft import SFTConfig


def trainer_class() -> type:
    """TRL's ``SFTTrainer`` with the completion-only loss (:func:`~joy_trainers.sft_loss.completion_loss`), fixed
    batches, each role's adapter in its checkpoints and a full disk at a checkpoint in one line."""
    import trl  # imported here: TRL is only needed to train, and it costs import time

    class CompletionSFTTrainer(trl.SFTTrainer):
        batches: list[list[int]] | None = None
        """Fixed batches (index lists into the train dataset, e.g. sized by tokens), or None: TRL's own loader."""

        def get_train_dataloader(self):  # noqa: D102
            if self.batches is None:
                return super().get_train_dataloader()
            from torch.utils.data import DataLoader

            loader = DataLoader(self.train_dataset, batch_sampler=self.batches, collate_fn=self.data_collator)
            return self.accelerator.prepare(loader)

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):  # noqa: D102
            from peft import PeftModel

            model = model if model is not None else self.model
            if not isinstance(model, PeftModel):
                return super()._load_from_checkpoint(resume_from_checkpoint, model)
            # the team's adapters are named after the roles, so a checkpoint holds each in its own folder
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            role = model.active_adapter
            path = Path(resume_from_checkpoint) / role / "adapter_model.safetensors"
            set_peft_model_state_dict(model, load_file(str(path)), adapter_name=role)

        def _save_checkpoint(self, model, trial):  # noqa: D102
            # a failure (a full disk, also in the words of safetensors or torch.save) is one line naming the
            # checkpoint and the free space, and leaves no half of it: the stage continues from the one before
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            what = f"the {folder.parent.name} stage's checkpoint of step {self.state.global_step}"
            with writing(folder, what, cleanup=[folder]):
                super()._save_checkpoint(model, trial)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: D102
            if num_items_in_batch is not None:
                self.loss_is_scaled_for_ga = True
                num_items_in_batch = num_items_in_batch.to(inputs["input_ids"].device)
            loss = completion_loss(model, inputs, num_items_in_batch)
            return (loss, None) if return_outputs else loss

    return CompletionSFTTrainer


def trl_args(cfg: SFTConfig, out: Path, lr: float) -> Any:
    """TRL's training arguments for one stage of ``cfg``'s run, writing its checkpoints under ``out``, at the
    learning rate ``lr``."""
    import trl

    return trl.SFTConfig(
        output_dir=str(out),
        num_train_epochs=1,  # the dataset already holds `epochs` passes in bucketed order
        learning_rate=lr,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_ratio,  # a float < 1 is a share of the steps
        adam_beta2=0.95,
        max_grad_norm=1.0,
        **{checkpointing_argument(): cfg.activation_checkpointing},
        train_sampling_strategy="sequential",  # keep the order of bucketed_order
        # a log row covers the steps since the last one: checkpoints at log boundaries keep a resumed run's rows
        logging_steps=math.gcd(5, cfg.checkpoint_steps) if cfg.checkpoint_steps else 5,
        save_strategy="steps" if cfg.checkpoint_steps else "no",  # checkpoints inside a stage (--resume)
        save_steps=cfg.checkpoint_steps or 500,
        save_total_limit=1,
        report_to=[],
        seed=cfg.seed,
        max_length=cfg.max_length,
        bf16=cfg.dtype == "bfloat16",
        fp16=cfg.dtype == "float16",
        use_cpu=not has_accelerator(),
        dataloader_num_workers=0,
        disable_tqdm=True,  # our own progress bar and metrics.jsonl instead of TRL's per-step dict lines
        remove_unused_columns=False,
    )


@functools.cache
def checkpointing_argument() -> str:
    """The training-arguments field that switches activation checkpointing: ``activation_checkpointing`` in the
    transformers versions that renamed it, ``gradient_checkpointing`` before (e.g. 5.17). TRL's own default is
    on, so the option must always reach it under the name the installed version knows."""
    import dataclasses

    import trl

    names = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def has_accelerator() -> bool:
    """Whether a CUDA GPU is there to train on."""
    return torch.cuda.is_available()


def append_line(path: Path, line: str, what: str) -> None:
    """Append ``line`` to the file ``path``; a failure (a full disk) cuts the file back to what it held and is
    one line naming it (:func:`~joy_trainers.rundir.writing`)."""
    size = path.stat().st_size if path.is_file() else 0
    with writing(path, what):
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            if path.is_file():
                with contextlib.suppress(OSError):
                    os.truncate(path, size)  # frees what the cut line took
            raise


def progress_callback(stage: str, epochs: float, metrics: Path) -> Any:
    """A TRL callback showing one progress bar for ``stage`` and appending each log of TRL (loss, learning
    rate, gradient norm) to ``metrics`` as one JSON line, with the epoch counted over the stage's ``epochs``
    passes (TRL sees the passes as one epoch of a longer dataset)."""
    from transformers import TrainerCallback  # imported here with TRL

    class Progress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
            # one bar and one metrics.jsonl row per log, from the main process
            self.bar = tqdm(total=state.max_steps, desc=f"sft {stage}", unit="step", disable=not is_main())

        def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
            self.bar.update(1)
            if state.global_step >= state.max_steps:  # the stage's end is a stage boundary: no TRL checkpoint
                control.should_save = False

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
            if not is_main():
                return
            logs = dict(logs or {})
            if "epoch" in logs:
                logs["epoch"] = round(float(logs["epoch"]) * epochs, 4)
            row = {"stage": stage, "step": state.global_step, **{k: v for k, v in logs.items() if k != "total_flos"}}
            append_line(metrics, json.dumps(row, default=float), "the metrics log")
            wrote(metrics)  # what --overwrite may remove
            if "loss" in logs:
                self.bar.set_postfix(loss=f"{logs['loss']:.3f}", epoch=f"{logs.get('epoch', 0):.2f}", refresh=False)

        def on_save(self, args, state, control, **kwargs):  # noqa: D102 - TRL's checkpoint and model card
            wrote(Path(args.output_dir) / f"checkpoint-{state.global_step}", Path(args.output_dir) / "README.md")

        def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
            self.bar.close()

    return Progress()
