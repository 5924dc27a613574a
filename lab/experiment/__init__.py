"""``python -m lab experiment CONFIG.toml``: a matrix of pre-training and fine-tuning runs, resumable cell by cell.

A matrix (``experiments/*.toml``) names a corpus, models and tasks; it expands into *cells*::

    vocab                                   WordPiece vocabulary of the corpus (bertkit vocab)
    prepare                                 token shards (bertkit prepare)
    tasktext/<model>, prepare/<model>       for a model with ``task_text = [tasks]``: those tasks' training
                                            text (lab.experiment.task_text) and its shards with the corpus
    pretrain/<model>                        one pre-training run per model (or: random init, an existing
                                            model, transformers' own pipeline in a subprocess); with
                                            ``continue_from = "<model>"`` it starts from that model's weights;
                                            ``pretrained_sha256`` pins an existing model's weights file
    finetune/<model>/<task>/lr<x>/seed<s>   the learning-rate grid (only when a task lists several rates)
    finetune/<model>/<task>/seed<s>         every model on every task, each seed (best grid rate on dev)
    features/<name>/<variant>/seed<s>       the feature-based approach (paper Table 7)

Each finished cell writes one small JSON file ``RESULTS/<cell with / -> __>.json`` (scores, seed, tokens seen,
wall and CPU time, commit, torch, CPU model; the schema is in ``lab/notes/CONTRACT-internal.md``), by default into
``results/<matrix name>/`` beside the config file, which is committed. A cell whose result file exists is
skipped, unless the config has changed what it computes since: each result records a fingerprint of the
cell's settings and its inputs' (``settings``; paths relative to the data root, so machines and checkouts
agree), and a changed cell stops the run with an error until ``--rerun-changed`` runs it and everything
downstream again (old result files move to ``RESULTS/replaced/``). A killed pre-training cell resumes from
its newest checkpoint (the Trainer resumes bitwise on CPU), and so does a fine-tuning cell (every
``CHECKPOINT_EVERY`` steps of :mod:`lab.experiment.finetune_cells`) whose settings and starting weights are
unchanged; its result counts the seconds of every sitting. SIGTERM or Ctrl-C stops a runner after
checkpointing the step in progress. Run outputs (models, logs) go to ``--out`` (default ``runs/<name>``). When a pending cell needs the model of a finished cell that is absent from ``--out`` (a
fresh machine), that cell is run again to rebuild it; its committed result file is kept.

Paths in the config resolve against the config file's directory; ``data_root`` (default
``../../shared/data`` from ``experiments/``) is where the corpus and task files are looked up.

The package: :mod:`.matrix` (the config and its cells), :mod:`.runner` (running them; :mod:`.locks` when
several runners share a matrix), :mod:`.results` (result files), :mod:`.cells` with :mod:`.pretrain_cells` and
:mod:`.finetune_cells` (what each kind of cell does) and :mod:`.paths` (where their outputs lie).
"""

from __future__ import annotations

from lab.experiment.matrix import (
    TABLE5_ROLES,
    Cell,
    Matrix,
    features_name,
    load_matrix,
    seeds_of,
    table5_rows,
    task_models,
)
from lab.experiment.results import cell_settings, machine_info, read_results, results_dir
from lab.experiment.runner import plan, run_matrix, select

__all__ = [
    "TABLE5_ROLES",
    "table5_rows",
    "Cell",
    "Matrix",
    "cell_settings",
    "features_name",
    "load_matrix",
    "machine_info",
    "plan",
    "read_results",
    "results_dir",
    "run_matrix",
    "seeds_of",
    "select",
    "task_models",
]
