#!/bin/sh
# Print the boot arguments that finish CPU isolation, and where this board's bootloader keeps them.
# Documentation/admin-guide/kernel-parameters.txt (isolcpus, nohz_full, rcu_nocbs, irqaffinity). POSIX sh.
# It only prints: --save and --restore are accepted like every script here and have nothing to record.
# shellcheck disable=SC2034,SC2317  # ER_NAME is read by lib.sh; er_usage/er_extra_option are called from it
set -u
ER_NAME=kernel_cmdline.sh
HERE=$(dirname "$0")
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
BOARD=""
BOARDS_DIR=${EDGE_RUNTIME_BOARDS:-$HERE/../boards}

er_usage() {
    cat <<'USAGE'
usage: kernel_cmdline.sh --cpus LIST [--board NAME] [--root DIR] [--dry-run] [--save FILE] [--restore FILE]

Prints the kernel boot arguments that set LIST apart for good
    isolcpus=managed_irq,domain,LIST nohz_full=LIST rcu_nocbs=LIST irqaffinity=HOUSEKEEPING
and the file the board's bootloader reads them from, from its profile in boards/ (found from the device tree, or
named with --board). It writes nothing: edit that file, then reboot.

  --cpus LIST     CPUs to set apart (e.g. 2-3); at least one online CPU must remain
  --board NAME    board profile (boards/NAME.toml) instead of detecting it
  --root DIR      read the board identity and CPUs below DIR instead of /
  --dry-run, --save FILE, --restore FILE   accepted; this script changes nothing
USAGE
}
er_extra_option() {
    case "$1" in
        --board) [ $# -ge 2 ] || er_die "--board needs a name"; BOARD=$2; er_shift=2 ;;
        --board=*) BOARD=${1#--board=} ;;
        *) return 1 ;;
    esac
}
er_parse "$@"
[ -z "$ER_RESTORE" ] || { er_say "nothing to restore: this script only prints"; exit 0; }
er_cpus_required
LIST=$(er_compact "$ER_LIST")
HK=$(er_compact "$ER_HK")

# key = "value" from a board profile (first match).
toml_get() { sed -n "s/^$2[[:space:]]*=[[:space:]]*\"\\(.*\\)\"[[:space:]]*\$/\\1/p" "$1" | head -n 1; }

profile=""
if [ -n "$BOARD" ]; then
    profile="$BOARDS_DIR/$BOARD.toml"
    [ -f "$profile" ] || er_die "--board $BOARD: no profile $profile"
elif [ -r "$ER_ROOT/proc/device-tree/compatible" ]; then
    compat=$(tr '\000' '\n' < "$ER_ROOT/proc/device-tree/compatible")
    for p in "$BOARDS_DIR"/*.toml; do
        [ -f "$p" ] || continue
        # compatible = ["raspberrypi,5-model-b", "brcm,bcm2712"]: the quoted strings, one a line
        wants=$(sed -n 's/^compatible[[:space:]]*=[[:space:]]*\[\(.*\)\]/\1/p' "$p" | grep -o '"[^"]*"' | tr -d '"')
        for want in $wants; do
            if printf '%s\n' "$compat" | grep -qxF "$want"; then profile=$p; break 2; fi
        done
    done
elif [ -d "$ER_ROOT/sys/class/dmi/id" ] && [ -f "$BOARDS_DIR/generic-x86.toml" ]; then
    profile="$BOARDS_DIR/generic-x86.toml"  # no device tree, a DMI table: a PC
fi

echo "isolcpus=managed_irq,domain,$LIST nohz_full=$LIST rcu_nocbs=$LIST irqaffinity=$HK"
if [ -n "$profile" ]; then
    name=$(toml_get "$profile" name)
    file=$(toml_get "$profile" file)
    how=$(toml_get "$profile" how)
    er_say "board $name: add them to $file${how:+ ($how)}, then reboot" >&2
else
    er_say "board not recognised: add them where your bootloader keeps the kernel command line (GRUB: GRUB_CMDLINE_LINUX in /etc/default/grub; Raspberry Pi: /boot/firmware/cmdline.txt; extlinux: the APPEND line of /boot/extlinux/extlinux.conf; U-Boot: bootargs), then reboot" >&2
fi
exit 0
