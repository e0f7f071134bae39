#!/bin/sh
# Apply the saved tuning configuration at boot (systemd unit edge-runtime-tuning.service, or the SysV/busybox init
# script edge-runtime-tuning.init). The configuration is a shell-style file:
#     CPUS=2-3            # CPUs to set apart (required)
#     GOVERNOR=performance
# stop/--restore puts back what the boot run changed (kept in /run, so it never outlives the boot). POSIX sh.
# shellcheck disable=SC2034,SC2317  # ER_NAME is read by lib.sh; er_usage/er_extra_option are called from it
set -u
ER_NAME=apply_at_boot.sh
HERE=$(dirname "$0")
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
CONF=/etc/edge-runtime/tuning.conf
STATE=/run/edge-runtime/boot.save

er_usage() {
    cat <<'USAGE'
usage: apply_at_boot.sh [--config FILE] [--dry-run] [--root DIR] [--save FILE]
       apply_at_boot.sh --restore [FILE] [--root DIR]

Reads CPUS= and GOVERNOR= from the configuration (default /etc/edge-runtime/tuning.conf), then runs
isolate_cpus.sh and cpufreq.sh with a save file (default /run/edge-runtime/boot.save).
USAGE
}
er_extra_option() {
    case "$1" in
        --config) [ $# -ge 2 ] || er_die "--config needs a file"; CONF=$2; er_shift=2 ;;
        --config=*) CONF=${1#--config=} ;;
        *) return 1 ;;
    esac
}
# --restore as the last word, with no file, means the boot save file.
last=""
for last in "$@"; do :; done
[ "$last" = --restore ] && set -- "$@" @boot
er_parse "$@"
[ "$ER_RESTORE" = @boot ] && ER_RESTORE="$ER_ROOT$STATE"
if [ -n "$ER_RESTORE" ]; then er_restore; exit $?; fi

[ -r "$ER_ROOT$CONF" ] || er_die "no configuration $ER_ROOT$CONF (write CPUS=2-3 there)"
# KEY=value, optionally quoted, optionally followed by a # comment
conf_get() { sed -n "s/^$1=[[:space:]]*//p" "$ER_ROOT$CONF" | sed 's/[[:space:]]*#.*$//' | tr -d "\"'" | tail -n 1; }
CPUS=$(conf_get CPUS)
GOVERNOR=$(conf_get GOVERNOR)
[ -n "$CPUS" ] || er_die "$CONF: CPUS= is missing"
[ -n "$ER_SAVE" ] || ER_SAVE="$ER_ROOT$STATE"
set -- --cpus "$CPUS"
[ -n "$ER_ROOT" ] && set -- "$@" --root "$ER_ROOT"
if [ "$ER_DRY_RUN" = 1 ]; then
    set -- "$@" --dry-run
else
    mkdir -p "$(dirname "$ER_SAVE")" && set -- "$@" --save "$ER_SAVE"
fi
sh "$HERE/isolate_cpus.sh" "$@" || exit $?
sh "$HERE/cpufreq.sh" "$@" --governor "${GOVERNOR:-performance}" || exit $?
