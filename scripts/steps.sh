# Numbered steps with their times, for scripts/demo.sh and scripts/tour.sh (sourced, not run).
# `step "1/5 what"` ends the step before it with its time and starts this one; `elapsed T` is the
# seconds since the time stamp T (`date +%s.%N`); `started` is when the script sourced this file.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
started=$(date +%s.%N)
last=$started
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() {
    [ "$last" = "$started" ] || printf '   (%s s)\n' "$(elapsed "$last")"
    last=$(date +%s.%N)
    printf '\n== %s\n' "$*"
}
