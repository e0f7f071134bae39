#!/bin/sh
# Keep the kernel's own work off the CPUs given with --cpus: IRQs (irq_affinity.sh), unbound workqueues, RPS,
# movable kernel threads, timer migration. Documentation/admin-guide/kernel-per-CPU-kthreads.rst. POSIX sh.
# shellcheck disable=SC2034,SC2317  # ER_NAME is read by lib.sh; er_usage/er_extra_option are called from it
set -u
ER_NAME=isolate_cpus.sh
HERE=$(dirname "$0")
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

er_usage() {
    cat <<'USAGE'
usage: isolate_cpus.sh --cpus LIST [--dry-run] [--root DIR] [--save FILE]
       isolate_cpus.sh --restore FILE [--dry-run] [--root DIR]

Runs irq_affinity.sh, then moves onto the housekeeping CPUs (all online CPUs except LIST):
unbound workqueues (/sys/devices/virtual/workqueue/cpumask and writeback/cpumask), network RPS masks that include
LIST (/sys/class/net/*/queues/rx-*/rps_cpus), movable kernel threads (on the live system only), and sets
kernel.timer_migration=0. What only the boot command line can do is printed by kernel_cmdline.sh.

  --cpus LIST     CPUs to set apart (e.g. 2-3); at least one online CPU must remain
USAGE
    er_common_usage
}
er_extra_option() { return 1; }
er_parse "$@"

if [ -n "$ER_RESTORE" ]; then er_restore; exit $?; fi
er_cpus_required
HK_MASK=$(er_mask "$ER_HK")
LIST=$(er_compact "$ER_LIST")

set -- --cpus "$LIST"
[ -n "$ER_ROOT" ] && set -- "$@" --root "$ER_ROOT"
[ -n "$ER_SAVE" ] && set -- "$@" --save "$ER_SAVE"
[ "$ER_DRY_RUN" = 1 ] && set -- "$@" --dry-run
sh "$HERE/irq_affinity.sh" "$@" || exit $?

for wq in /sys/devices/virtual/workqueue/cpumask /sys/devices/virtual/workqueue/writeback/cpumask; do
    er_write "$wq" "$HK_MASK"
    case $? in 1) er_say "could not set $wq" ;; esac
done

# RPS: only queues whose mask reaches the isolated CPUs; 0 (RPS off) stays off.
for rps in "$ER_ROOT"/sys/class/net/*/queues/rx-*/rps_cpus; do
    [ -f "$rps" ] || continue
    cur=$(tr -d ',\n' < "$rps")
    [ -n "$cur" ] || continue
    hit=0
    for c in $ER_LIST; do
        # bit c of the hex mask: hex digit c/4 from the right, bit c%4 of it
        bit=$(printf '%s\n' "$cur" | awk -v c="$c" '{ i = length($0) - int(c / 4); if (i < 1) { print 0; exit }
            v = index("0123456789abcdef", tolower(substr($0, i, 1))) - 1; print int(v / 2 ^ (c % 4)) % 2 }')
        [ "$bit" = 1 ] && hit=1
    done
    [ "$hit" = 1 ] || continue
    er_write "${rps#"$ER_ROOT"}" "$HK_MASK"
done

# Movable kernel threads (children of kthreadd that may run on several CPUs): live system only.
if [ -z "$ER_ROOT" ] || [ "$ER_ROOT" = / ]; then
    if command -v taskset >/dev/null 2>&1; then
        HK_LIST=$(er_compact "$ER_HK")
        for st in /proc/[0-9]*/status; do
            pid=${st%/status}; pid=${pid#/proc/}
            ppid=$(sed -n 's/^PPid:[[:space:]]*//p' "$st" 2>/dev/null)
            [ "$ppid" = 2 ] || continue
            allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$st" 2>/dev/null)
            case "$allowed" in *,*|*-*) ;; *) continue ;; esac  # per-CPU kthread: stays
            [ "$allowed" = "$HK_LIST" ] && continue
            if [ "$ER_DRY_RUN" = 1 ]; then er_say "would move kernel thread $pid to CPU $HK_LIST"; continue; fi
            if taskset -pc "$HK_LIST" "$pid" >/dev/null 2>&1; then
                er_save_line "affinity$ER_TAB$pid$ER_TAB$allowed"
            fi
        done
    else
        er_say "taskset not found: kernel threads left where they are"
    fi
fi

er_write /proc/sys/kernel/timer_migration 0
case $? in 1) er_say "could not set kernel.timer_migration" ;; esac
er_say "$( [ "$ER_DRY_RUN" = 1 ] && echo 'would isolate' || echo 'isolated') CPU $LIST; for the boot command line run kernel_cmdline.sh --cpus $LIST"
exit 0
