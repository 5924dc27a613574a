"""Inference pipelines shared by the server's routes and ``bertkit predict``: text in, answers with
character offsets out. The model call is passed in (``run(ids, type_ids) -> outputs``), so the server
batches it across requests and the command line runs it in plain batches, through the same code."""
