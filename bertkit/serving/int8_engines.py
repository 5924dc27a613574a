"""The int8 engines ``bertkit serve --int8-engine`` takes (see :mod:`bertkit.serving.quantize`), here without
torch: the CLI's parser reads them whatever the command, and importing the quantiser for them cost
`bertkit prepare` and every other command a torch import (~1.3 CPU-s)."""

ENGINES = ("auto", "x86", "fbgemm", "onednn")
