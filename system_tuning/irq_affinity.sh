#!/bin/sh
# Move every IRQ off the CPUs given with --cpus, onto the housekeeping CPUs (all online CPUs minus those).
# See Documentation/core-api/irq/irq-affinity.rst. POSIX sh (busybox sh, dash).
# shellcheck disable=SC2034,SC2317  # ER_NAME is read by lib.sh; er_usage/er_extra_option are called from it
set -u
ER_NAME=irq_affinity.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

er_usage() {
    cat <<'USAGE'
usage: irq_affinity.sh --cpus LIST [--dry-run] [--root DIR] [--save FILE]
       irq_affinity.sh --restore FILE [--dry-run] [--root DIR]

Moves every IRQ (/proc/irq/*/smp_affinity_list, or the smp_affinity mask where the list file is missing) and
/proc/irq/default_smp_affinity to the housekeeping CPUs: all online CPUs except LIST. IRQs the kernel will not move
(per-CPU and managed interrupts: the write fails with EIO before Linux 6.12, EPERM after) are skipped and named.
If irqbalance is installed, IRQBALANCE_BANNED_CPULIST=LIST is set in its configuration so it keeps off LIST;
if it runs without that setting it will move IRQs back, and this says so.

  --cpus LIST     CPUs to keep IRQs away from (e.g. 2-3); at least one online CPU must remain
USAGE
    er_common_usage
}
er_extra_option() { return 1; }
er_parse "$@"

if [ -n "$ER_RESTORE" ]; then er_restore; exit $?; fi
er_cpus_required
HK_LIST=$(er_compact "$ER_HK")
HK_MASK=$(er_mask "$ER_HK")

moved=0; refused=""
for dir in "$ER_ROOT"/proc/irq/[0-9]*; do
    [ -d "$dir" ] || continue
    irq=${dir##*/}
    if [ -e "$dir/smp_affinity_list" ]; then
        er_write "/proc/irq/$irq/smp_affinity_list" "$HK_LIST"; rc=$?
    else
        er_write "/proc/irq/$irq/smp_affinity" "$HK_MASK"; rc=$?
    fi
    case $rc in
        0) moved=$((moved + 1)) ;;
        1) refused="$refused $irq" ;;
    esac
done
if er_write /proc/irq/default_smp_affinity "$HK_MASK"; then :; else
    [ $? = 1 ] && er_say "could not set /proc/irq/default_smp_affinity"
fi
verb="moved"; [ "$ER_DRY_RUN" = 1 ] && verb="would move"
er_say "$verb $moved IRQ(s) to CPU $HK_LIST (housekeeping), away from CPU $(er_compact "$ER_LIST")"
if [ -n "$refused" ]; then
    er_say "skipped IRQ${refused}: the kernel refused to move them (per-CPU or managed interrupts)"
fi

# irqbalance would undo this unless told to keep off the isolated CPUs.
conf=""
for f in /etc/default/irqbalance /etc/sysconfig/irqbalance; do
    [ -f "$ER_ROOT$f" ] && conf=$f && break
done
running=0
for comm in "$ER_ROOT"/proc/[0-9]*/comm; do
    [ -r "$comm" ] && [ "$(cat "$comm" 2>/dev/null)" = irqbalance ] && running=1 && break
done
installed=0
for b in /usr/sbin/irqbalance /usr/bin/irqbalance /sbin/irqbalance; do [ -x "$ER_ROOT$b" ] && installed=1; done
if [ -n "$conf" ] || [ "$installed" = 1 ]; then
    conf=${conf:-/etc/default/irqbalance}
    line="IRQBALANCE_BANNED_CPULIST=$(er_compact "$ER_LIST")"
    if [ -f "$ER_ROOT$conf" ] && grep -qx "$line" "$ER_ROOT$conf"; then
        :
    elif [ "$ER_DRY_RUN" = 1 ]; then
        er_say "would set $line in $conf"
    else
        er_backup_file "$conf"
        tmp="$ER_ROOT$conf.edge-runtime.$$"
        {
            if [ -f "$ER_ROOT$conf" ]; then grep -v '^IRQBALANCE_BANNED_CPULIST=' "$ER_ROOT$conf"; fi
            printf '%s\n' "$line"
        } > "$tmp" || er_die "cannot write $tmp"
        mv "$tmp" "$ER_ROOT$conf" || er_die "cannot write $ER_ROOT$conf"
        er_say "set $line in $conf"
    fi
    if [ "$running" = 1 ]; then
        er_say "irqbalance is running: restart it (systemctl restart irqbalance) so it reads $conf"
    fi
elif [ "$running" = 1 ]; then
    er_say "warning: irqbalance is running and will move IRQs back onto CPU $(er_compact "$ER_LIST"); stop it or configure IRQBALANCE_BANNED_CPULIST"
fi
exit 0
