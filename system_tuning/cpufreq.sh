#!/bin/sh
# Governor and minimum frequency for the CPUs given with --cpus, turbo/boost off where the knob exists.
# Documentation/admin-guide/pm/cpufreq.rst and intel_pstate.rst. POSIX sh.
# shellcheck disable=SC2034,SC2317  # ER_NAME is read by lib.sh; er_usage/er_extra_option are called from it
set -u
ER_NAME=cpufreq.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
GOVERNOR=performance

er_usage() {
    cat <<'USAGE'
usage: cpufreq.sh --cpus LIST [--governor NAME] [--dry-run] [--root DIR] [--save FILE]
       cpufreq.sh --restore FILE [--dry-run] [--root DIR]

Sets scaling_governor (default performance) and raises scaling_min_freq to the highest frequency for each CPU of
LIST, and turns turbo/boost off (intel_pstate/no_turbo=1, cpufreq/boost=0) where that knob exists, so the clock
does not move during a measurement.

  --cpus LIST       CPUs to set (e.g. 2-3)
  --governor NAME   governor to set (default performance); must be in scaling_available_governors
USAGE
    er_common_usage
}
er_extra_option() {
    case "$1" in
        --governor) [ $# -ge 2 ] || er_die "--governor needs a name"; GOVERNOR=$2; er_shift=2 ;;
        --governor=*) GOVERNOR=${1#--governor=} ;;
        *) return 1 ;;
    esac
}
er_parse "$@"

if [ -n "$ER_RESTORE" ]; then er_restore; exit $?; fi
[ -n "$ER_CPUS" ] || er_die "--cpus LIST is required"
LIST=$(er_expand "$ER_CPUS") || exit 2
ONLINE=$(er_online) || exit 2
bad=$(er_minus "$LIST" "$ONLINE")
[ -z "$bad" ] || er_die "--cpus $ER_CPUS: CPU $(er_compact "$bad") does not exist (online: $(er_compact "$ONLINE"))"

done_any=0
for c in $LIST; do
    d=/sys/devices/system/cpu/cpu$c/cpufreq
    if [ ! -d "$ER_ROOT$d" ]; then er_say "CPU $c has no cpufreq: nothing to set"; continue; fi
    avail=$(cat "$ER_ROOT$d/scaling_available_governors" 2>/dev/null || true)
    if [ -n "$avail" ]; then
        case " $avail " in *" $GOVERNOR "*) ;; *) er_die "--governor $GOVERNOR: CPU $c offers only: $avail" ;; esac
    fi
    er_write "$d/scaling_governor" "$GOVERNOR" || er_say "could not set the governor of CPU $c"
    max=$(cat "$ER_ROOT$d/cpuinfo_max_freq" 2>/dev/null || cat "$ER_ROOT$d/scaling_max_freq" 2>/dev/null || true)
    if [ -n "$max" ]; then
        er_write "$d/scaling_min_freq" "$max" || er_say "could not raise the minimum frequency of CPU $c"
    fi
    done_any=1
done
if er_write /sys/devices/system/cpu/intel_pstate/no_turbo 1; then :; else [ $? = 1 ] && er_say "could not turn turbo off"; fi
if er_write /sys/devices/system/cpu/cpufreq/boost 0; then :; else [ $? = 1 ] && er_say "could not turn boost off"; fi
[ "$done_any" = 1 ] && er_say "$( [ "$ER_DRY_RUN" = 1 ] && echo 'would set' || echo 'set') CPU $(er_compact "$LIST") to $GOVERNOR at its highest frequency"
exit 0
