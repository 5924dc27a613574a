"""Task readers and metrics: GLUE, generic classification, CoNLL NER, SWAG (SQuAD lives in squad*.py)."""
