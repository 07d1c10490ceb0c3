#!/bin/bash
# SmolLM2 on household `default`, arms side by side: `agentrl sft` (expert episodes : random episodes) then
# `agentrl train +experiment=smollm2_household` from the model it wrote, at a given learning rate, each arm stopped
# at DEADLINE seconds (a grace stop: its checkpoint and metrics stay); per arm it prints
# held-out success at each evaluation and the rollout's signal. How docs/models.md's "RL that makes SmolLM2 better"
# was measured, on one H200 (then written as +experiment=smollm2_household_cpu with 8 x 8 episodes, 64 held-out
# tasks every 4 iterations and micro-batches of 64 rows: the same composed config, `--cfg job` compared):
#   OUT=/tmp/arms HW=gpu SFTMODEL=model=smollm2-135m-instruct EXTRA=trainer.iterations=60 DEADLINE=420 \
#     ARMS="A:60:60:2e-5 B:0:120:2e-5 C:60:20:2e-5 D:60:60:5e-5" bash scripts/smollm2_arms.sh
# ARMS: NAME:EXPERT_EPISODES:RANDOM_EPISODES:RL_LEARNING_RATE; a numeric NAME is also the arm's seed.
# EXPERIMENT (default smollm2_household) picks the RL recipe; SFTEXTRA adds overrides to `agentrl sft` (EXTRA's go to
# `agentrl train`). The CPU recipe, one seed, bf16, on the recipe's compact template (the sft must clone the template
# RL plays), within an hour:
#   OUT=/tmp/cpu HW=cpu SFTMODEL=model=smollm2-135m-instruct EXPERIMENT=smollm2_household_cpu DEADLINE=3600 \
#     SFTEXTRA="hardware.precision=bf16 env.prompt_template=compact" \
#     EXTRA="hardware.precision=bf16 rollout.generate_in_bf16=true" ARMS="0:60:60:5e-5" bash scripts/smollm2_arms.sh
# On this CPU, a quick check of the script itself with the tiny model:
#   OUT=/tmp/arms HW=cpu SFTMODEL=+debug=fast EXTRA="trainer.iterations=2 eval.num_tasks=4 trainer.tasks_per_iteration=2
#     trainer.group_size=2" DEADLINE=300 ARMS="0:4:4:2e-5" bash scripts/smollm2_arms.sh
set -u
EXPERIMENT=${EXPERIMENT:-smollm2_household}
SFTEXTRA=${SFTEXTRA:-}
SFTEVAL=${SFTEVAL:-64}
start=$(date +%s)
mkdir -p "$OUT"
seed_of() { [[ $1 =~ ^[0-9]+$ ]] && echo "$1" || echo 0; }
arm() {
  name=$1; exp=$2; rnd=$3; lr=$4; seed=$(seed_of $name); d=$OUT/$name; log=$OUT/$name.log
  python -m agentrl.cli sft $SFTMODEL hardware=$HW env.level=default sft.episodes=$exp \
    sft.random_episodes=$rnd sft.epochs=1 sft.learning_rate=5e-5 sft.eval_before=false eval.num_tasks=$SFTEVAL \
    rollout.max_new_tokens=32 seed=$seed $SFTEXTRA hydra.run.dir=$d/sft > $log 2>&1
  echo "== sft done at $(( $(date +%s) - start )) s" >> $log
  left=$(( DEADLINE - ($(date +%s) - start) ))
  timeout -k 30 $left python -m agentrl.cli train +experiment=$EXPERIMENT model.path=$d/sft/model \
    hardware=$HW logger=none trainer.learning_rate=$lr trainer.save_every=1000 seed=$seed $EXTRA \
    hydra.run.dir=$d/rl >> $log 2>&1
  echo "== rl ended at $(( $(date +%s) - start )) s" >> $log
  grep -v '"losses"' $d/sft/sft.json | head -40 >> $log
  python - $d/rl/metrics.jsonl >> $log <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    keys = {"eval/success": "heldout", "rollout/success": "roll", "rollout/groups_without_signal": "nosig",
            "rollout/invalid_rate": "inval", "train/entropy": "ent", "time/iteration_s": "s", "time/elapsed_s": "el"}
    print(r.get("iteration"), " ".join(f"{v}={r[k]:.3f}" for k, v in keys.items() if isinstance(r.get(k), (int, float))))
PY
  }
for spec in $ARMS; do IFS=: read n e r lr <<< "$spec"; arm $n $e $r $lr & done
wait
echo "all done at $(( $(date +%s) - start )) s"
