# shellcheck shell=sh
# Shared by the system_tuning scripts: options, CPU lists, and every write with dry-run, save and restore.
# POSIX sh: runs under busybox sh and dash. Sourced, never run.
#
# Save file format (one change a line, tab-separated, in the order made; restore walks it backwards):
#   value   PATH  NL  OLD      PATH's content was OLD (NL=1: followed by a newline)
#   content PATH  COPY         PATH's content, byte for byte, is in COPY: for values a line cannot hold exactly
#                              (a newline or tab inside, several trailing newlines); written back with cat
#   copy    PATH  COPY         PATH was a regular file, copied to COPY (next to the save file)
#   absent  PATH               PATH did not exist
#   affinity PID  OLD          task PID had CPU list OLD (taskset)
# PATH is relative to --root, so a save made on a tree restores on that tree.

# Bytes, not characters: ${#value} and the byte counts below must agree whatever the user's locale.
LC_ALL=C
export LC_ALL

ER_ROOT=""
ER_DRY_RUN=0
ER_SAVE=""
ER_RESTORE=""
ER_CPUS=""
ER_TAB=$(printf '\t')
ER_NL='
'

# The options every script takes, for the end of its --help.
er_common_usage() {
    cat <<'USAGE'
  --dry-run       print what would be written, write nothing
  --root DIR      operate on a tree below DIR instead of / (for tests and captured boards)
  --save FILE     record every value before changing it (append)
  --restore FILE  put back exactly what --save recorded
USAGE
}

er_say() { printf '%s: %s\n' "$ER_NAME" "$*"; }
er_die() { printf '%s: error: %s\n' "$ER_NAME" "$*" >&2; exit 2; }

# Parse the options every script takes; the script's own ones are handled by er_extra_option (return 1 if unknown).
er_parse() {
    while [ $# -gt 0 ]; do
        case "$1" in
            -h|--help) er_usage; exit 0 ;;
            --dry-run|-n) ER_DRY_RUN=1 ;;
            --root) [ $# -ge 2 ] || er_die "--root needs a directory"; ER_ROOT=${2%/}; shift ;;
            --root=*) ER_ROOT=${1#--root=}; ER_ROOT=${ER_ROOT%/} ;;
            --save) [ $# -ge 2 ] || er_die "--save needs a file"; ER_SAVE=$2; shift ;;
            --save=*) ER_SAVE=${1#--save=} ;;
            --restore) [ $# -ge 2 ] || er_die "--restore needs a file"; ER_RESTORE=$2; shift ;;
            --restore=*) ER_RESTORE=${1#--restore=} ;;
            --cpus) [ $# -ge 2 ] || er_die "--cpus needs a CPU list"; ER_CPUS=$2; shift ;;
            --cpus=*) ER_CPUS=${1#--cpus=} ;;
            *)
                er_shift=1
                er_extra_option "$@" || er_die "unknown option '$1' (see --help)"
                shift "$er_shift"
                continue ;;
        esac
        shift
    done
    if [ -n "$ER_ROOT" ] && [ ! -d "$ER_ROOT" ]; then er_die "--root '$ER_ROOT': no such directory"; fi
    if [ -n "$ER_SAVE" ] && [ -n "$ER_RESTORE" ]; then er_die "--save and --restore do not go together"; fi
    # The save file must be writable before anything changes: a change that cannot be recorded is not made.
    if [ -n "$ER_SAVE" ] && [ "$ER_DRY_RUN" = 0 ]; then
        if [ ! -s "$ER_SAVE" ]; then
            { printf '# edge-runtime system_tuning save v1, root %s\n' "${ER_ROOT:-/}" > "$ER_SAVE"; } 2>/dev/null ||
                er_die "--save '$ER_SAVE': cannot write"
        elif ! head -n 1 "$ER_SAVE" | grep -q '^# edge-runtime system_tuning save v1'; then
            er_die "--save '$ER_SAVE': exists and is not a system_tuning save file"
        elif ! { : >> "$ER_SAVE"; } 2>/dev/null; then
            er_die "--save '$ER_SAVE': cannot write"
        fi
    fi
}

# "0-2,5" -> "0 1 2 5" (sorted, unique); dies with the list in the message when it is not a CPU list.
er_expand() {
    er_out=""
    er_old_ifs=$IFS; IFS=,
    for er_part in $1; do
        IFS=$er_old_ifs
        case "$er_part" in
            ''|*[!0-9-]*|-*|*-|*-*-*) er_die "'$1' is not a CPU list (e.g. 2-3 or 1,3)" ;;
            *-*) er_lo=${er_part%-*}; er_hi=${er_part#*-} ;;
            *) er_lo=$er_part; er_hi=$er_part ;;
        esac
        er_lo=$(printf '%s' "$er_lo" | sed 's/^0*\([0-9]\)/\1/'); er_hi=$(printf '%s' "$er_hi" | sed 's/^0*\([0-9]\)/\1/')
        if [ "${#er_hi}" -gt 4 ] || [ "$er_hi" -ge 8192 ]; then
            er_die "'$1': CPU $er_hi is beyond any machine (at most 8191)"
        fi
        [ "$er_lo" -le "$er_hi" ] || er_die "'$1' is not a CPU list (range $er_part goes down)"
        while [ "$er_lo" -le "$er_hi" ]; do er_out="$er_out $er_lo"; er_lo=$((er_lo + 1)); done
    done
    IFS=$er_old_ifs
    # shellcheck disable=SC2086
    printf '%s\n' $er_out | sort -n -u | tr '\n' ' ' | sed 's/ $//'
}

# "0 1 2 5" -> "0-2,5"
er_compact() {
    er_out=""; er_start=""; er_prev=""
    for er_c in $1; do
        if [ -n "$er_prev" ] && [ "$er_c" -eq $((er_prev + 1)) ]; then er_prev=$er_c; continue; fi
        if [ -n "$er_start" ]; then
            if [ "$er_start" = "$er_prev" ]; then er_out="$er_out,$er_start"; else er_out="$er_out,$er_start-$er_prev"; fi
        fi
        er_start=$er_c; er_prev=$er_c
    done
    if [ -n "$er_start" ]; then
        if [ "$er_start" = "$er_prev" ]; then er_out="$er_out,$er_start"; else er_out="$er_out,$er_start-$er_prev"; fi
    fi
    printf '%s\n' "${er_out#,}"
}

# "0 1 5" -> hex mask in comma-separated 32-bit words, most significant first, as the kernel prints it.
er_mask() {
    er_max=0
    for er_c in $1; do [ "$er_c" -gt "$er_max" ] && er_max=$er_c; done
    er_words=$((er_max / 32 + 1)); er_out=""; er_w=$((er_words - 1))
    while [ "$er_w" -ge 0 ]; do
        er_v=0
        for er_c in $1; do
            [ $((er_c / 32)) -eq "$er_w" ] && er_v=$((er_v | (1 << (er_c % 32))))
        done
        er_out="$er_out,$(printf '%08x' "$er_v")"
        er_w=$((er_w - 1))
    done
    printf '%s\n' "${er_out#,}"
}

# Words of $1 not in $2.
er_minus() {
    er_out=""
    for er_a in $1; do
        er_in=0
        for er_b in $2; do [ "$er_a" = "$er_b" ] && er_in=1; done
        [ "$er_in" = 0 ] && er_out="$er_out $er_a"
    done
    printf '%s\n' "${er_out# }"
}

er_online() {
    for er_f in online present possible; do
        if [ -r "$ER_ROOT/sys/devices/system/cpu/$er_f" ]; then
            er_expand "$(cat "$ER_ROOT/sys/devices/system/cpu/$er_f")"
            return $?
        fi
    done
    er_die "cannot tell which CPUs exist: no $ER_ROOT/sys/devices/system/cpu/online"
}

# Check --cpus against the CPUs that exist and keep at least one housekeeping CPU. Sets ER_LIST, ER_HK.
er_cpus_required() {
    [ -n "$ER_CPUS" ] || er_die "--cpus LIST is required (the CPUs to set apart, e.g. --cpus 2-3)"
    ER_LIST=$(er_expand "$ER_CPUS") || exit 2
    ER_ONLINE=$(er_online) || exit 2
    er_bad=$(er_minus "$ER_LIST" "$ER_ONLINE")
    [ -z "$er_bad" ] || er_die "--cpus $ER_CPUS: CPU $(er_compact "$er_bad") does not exist (online: $(er_compact "$ER_ONLINE"))"
    ER_HK=$(er_minus "$ER_ONLINE" "$ER_LIST")
    [ -n "$ER_HK" ] || er_die "--cpus $ER_CPUS: that is every CPU; refusing to leave no housekeeping CPU"
}

er_save_line() {
    [ -n "$ER_SAVE" ] || return 0
    printf '%s\n' "$1" >> "$ER_SAVE" || er_die "--save '$ER_SAVE': cannot append"
}

# er_write PATH VALUE: PATH is relative to the root. Returns 0 written or unchanged, 1 refused, 2 not present.
er_write() {
    er_path=$1; er_value=$2; er_full="$ER_ROOT$er_path"
    [ -e "$er_full" ] || return 2
    er_old=$(cat "$er_full" 2>/dev/null) || er_old=""
    if [ "$er_old" = "$er_value" ]; then return 0; fi
    if [ "$ER_DRY_RUN" = 1 ]; then
        er_say "would write '$er_value' to $er_path (now '$er_old')"
        return 0
    fi
    if [ -z "$(tail -c 1 "$er_full" 2>/dev/null)" ] && [ -s "$er_full" ]; then er_nl=1; else er_nl=0; fi
    # A value one save line cannot hold exactly (a newline or tab inside, more than one trailing newline, a NUL):
    # keep its bytes in a file beside the save file.
    er_bytes=$(wc -c < "$er_full" 2>/dev/null | tr -d ' ')
    er_exact=1
    case "$er_old" in *"$ER_TAB"*|*"$ER_NL"*) er_exact=0 ;; esac
    [ "$er_bytes" = $((${#er_old} + er_nl)) ] || er_exact=0
    er_copy=""
    if [ "$er_exact" = 0 ] && [ -n "$ER_SAVE" ]; then
        er_n=$(grep -c . "$ER_SAVE" 2>/dev/null || echo 0)
        er_copy="$ER_SAVE.$er_n.content"
        cat "$er_full" > "$er_copy" 2>/dev/null || er_die "cannot keep the old content of $er_path in $er_copy"
    fi
    if ! (printf '%s\n' "$er_value" > "$er_full") 2>/dev/null; then
        [ -z "$er_copy" ] || rm -f "$er_copy"
        return 1
    fi
    if [ -n "$er_copy" ]; then
        er_save_line "content$ER_TAB$er_path$ER_TAB$er_copy"
    else
        er_save_line "value$ER_TAB$er_path$ER_TAB$er_nl$ER_TAB$er_old"
    fi
    return 0
}

# er_edit_file PATH: save a copy (or that it was absent) before the caller rewrites PATH.
er_backup_file() {
    er_full="$ER_ROOT$1"
    [ -n "$ER_SAVE" ] || return 0
    if [ -f "$er_full" ]; then
        er_n=$(grep -c . "$ER_SAVE" 2>/dev/null || echo 0)
        er_copy="$ER_SAVE.$er_n.copy"
        cp -p "$er_full" "$er_copy" || er_die "cannot copy $er_full to $er_copy"
        er_save_line "copy$ER_TAB$1$ER_TAB$er_copy"
    else
        er_save_line "absent$ER_TAB$1"
    fi
}

# Put back what a save file recorded, newest change first.
er_restore() {
    [ -r "$ER_RESTORE" ] || er_die "--restore '$ER_RESTORE': cannot read"
    head -n 1 "$ER_RESTORE" | grep -q '^# edge-runtime system_tuning save v1' ||
        er_die "--restore '$ER_RESTORE': not a system_tuning save file"
    er_saved_root=$(head -n 1 "$ER_RESTORE" | sed -n 's/^# edge-runtime system_tuning save v1, root //p')
    if [ -n "$er_saved_root" ] && [ "$er_saved_root" != "${ER_ROOT:-/}" ]; then
        er_die "--restore '$ER_RESTORE': recorded for root '$er_saved_root', not '${ER_ROOT:-/}' (pass --root $er_saved_root)"
    fi
    # Number the lines, reverse them (tac is not everywhere), skip the header. Carry on past a failure: put back all
    # that can be, then fail (exit 1) naming every line that could not be restored.
    sed -n '2,$=;2,$p' "$ER_RESTORE" | sed -n 'N;s/\n/\t/;p' | sed -n '1!G;h;$p' | {
    er_failed=""
    while IFS="$ER_TAB" read -r er_line er_kind er_a er_b er_c; do
        # A path must stay below the root: absolute, no '..' component (a save file is data, not a script).
        case "$er_kind" in
            value|content|copy|absent)
                case "$er_a" in
                    /*) case "/$er_a/" in */../*|*/./*) er_bad="path '$er_a' leaves the root" ;; *) er_bad="" ;; esac ;;
                    *) er_bad="no absolute path" ;;
                esac
                if [ -n "$er_bad" ]; then
                    er_say "save line $er_line: $er_bad; not restored"; er_failed="$er_failed $er_line"; continue
                fi ;;
        esac
        case "$er_kind" in
            value)
                case "$er_b" in 0|1) ;; *) er_say "save line $er_line: malformed value line"; er_failed="$er_failed $er_line"; continue ;; esac
                if [ "$ER_DRY_RUN" = 1 ]; then er_say "would restore '$er_c' to $er_a"; continue; fi
                if [ "$er_b" = 1 ]; then er_fmt='%s\n'; else er_fmt='%s'; fi
                # shellcheck disable=SC2059
                if ! (printf "$er_fmt" "$er_c" > "$ER_ROOT$er_a") 2>/dev/null; then
                    er_say "could not restore $er_a (save line $er_line)"; er_failed="$er_failed $er_line"
                fi ;;
            content|copy)
                if [ ! -f "$er_b" ]; then
                    er_say "save line $er_line: the saved copy '$er_b' is missing"; er_failed="$er_failed $er_line"; continue
                fi
                if [ "$ER_DRY_RUN" = 1 ]; then er_say "would restore $er_a from $er_b"; continue; fi
                if [ "$er_kind" = content ]; then
                    (cat "$er_b" > "$ER_ROOT$er_a") 2>/dev/null
                else
                    cp -p "$er_b" "$ER_ROOT$er_a" 2>/dev/null
                fi || { er_say "could not restore $er_a (save line $er_line)"; er_failed="$er_failed $er_line"; } ;;
            absent)
                if [ "$ER_DRY_RUN" = 1 ]; then er_say "would remove $er_a"; continue; fi
                rm -f "$ER_ROOT$er_a" 2>/dev/null || { er_say "could not remove $er_a (save line $er_line)"; er_failed="$er_failed $er_line"; } ;;
            affinity)
                case "$er_a" in ''|*[!0-9]*) er_say "save line $er_line: '$er_a' is not a task id"; er_failed="$er_failed $er_line"; continue ;; esac
                case "$er_b" in ''|*[!0-9,-]*) er_say "save line $er_line: '$er_b' is not a CPU list"; er_failed="$er_failed $er_line"; continue ;; esac
                if [ "$ER_DRY_RUN" = 1 ]; then er_say "would give task $er_a CPUs $er_b"; continue; fi
                # A task that has ended since needs nothing back; one that is there and refuses is a failure.
                if [ -d "/proc/$er_a" ] && ! taskset -pc "$er_b" "$er_a" >/dev/null 2>&1 && [ -d "/proc/$er_a" ]; then
                    er_say "could not give task $er_a CPUs $er_b back (save line $er_line)"; er_failed="$er_failed $er_line"
                fi ;;
            '') [ -z "$er_a$er_b$er_c" ] || { er_say "save line $er_line: malformed"; er_failed="$er_failed $er_line"; } ;;
            *) er_say "save line $er_line: unknown kind '$er_kind', cannot restore it"; er_failed="$er_failed $er_line" ;;
        esac
    done
    if [ -n "$er_failed" ]; then
        printf '%s: error: could not restore save line(s)%s of %s\n' "$ER_NAME" "$er_failed" "$ER_RESTORE" >&2
        return 1
    fi
    return 0
    }
}
