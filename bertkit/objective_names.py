"""The pre-training objectives by name, each with its one-line summary, without their code: what
``bertkit pretrain --objective`` offers. The CLI's parser reads this for every command, and importing
:mod:`bertkit.objectives` for it cost `bertkit prepare` and every other command a torch import (~1.3 CPU-s).
Each class in :data:`bertkit.objectives.REGISTRY` takes its summary from here, in this order."""

OBJECTIVES: dict[str, str] = {
    "mlm+nsp": "the paper's masked LM + next sentence prediction",
    "mlm": "masked LM on single segments (the paper's No NSP ablation)",
    "ltr": "a left-to-right LM from unmasked inputs (the paper's LTR & No NSP ablation)",
    "roberta": "RoBERTa's recipe: masked LM, no NSP, full sentences packed across documents, dynamic masking",
    "electra": "ELECTRA: a small generator fills masked positions, the encoder spots the replaced tokens",
}
