# Sourced by scripts that run independent jobs in the background, at most N at a time.
# wait_for_slot N: returns once fewer than N of this shell's background jobs are running.
wait_for_slot() {
  while (( $(jobs -rp | wc -l) >= $1 )); do wait -n || true; done
}
