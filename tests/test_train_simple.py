"""adamw_trainer: the step count follows Batches' epochs (ragged end dropped), the schedule spans it, training runs."""

import torch
from torch import nn

from bertkit.train.simple import adamw_trainer


def test_steps_follow_batches_epochs_and_training_runs(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    items = [(torch.randn(3), torch.randn(1)) for _ in range(10)]

    def collate(batch):
        return torch.stack([x for x, _ in batch]), torch.stack([y for _, y in batch])

    def loss_fn(m, batch):
        x, y = batch
        return nn.functional.mse_loss(m(x), y)

    kwargs = dict(epochs=1.5, lr=1e-2, weight_decay=0.0, warmup_ratio=0.0, seed=1, progress=False)
    trainer, steps = adamw_trainer(model, items, 4, collate, out_dir=tmp_path, loss_fn=loss_fn, **kwargs)
    assert steps == 3  # 10 // 4 = 2 batches an epoch, 1.5 epochs
    before = model.weight.detach().clone()
    trainer.fit()
    assert not torch.equal(before, model.weight.detach())
    assert trainer.step == 3
