#!/bin/sh
# make test-pythons: the whole suite on each Python that boards ship (3.10: Jetson's JetPack 6; 3.11: Debian 12;
# 3.13: Raspberry Pi OS and Debian 13), with the interpreters this machine has. Each version gets its own virtual
# environment (.venv-pyX.Y, rebuilt when pyproject.toml or constraints.txt change) installed with the same constraints
# (environment markers pick the releases 3.10 can run). A version whose interpreter is not found is skipped, and said;
# the exit status is that of the suites that ran (1 if one failed, 2 if none could run).
#
# Usage: tests/pythons/run.sh [VERSION...]   (default: 3.10 3.11 3.13; PYTEST_ARGS overrides the pytest arguments)
set -u
cd "$(dirname "$0")/../.." || exit 2

find_python() {  # find_python 3.10: the interpreter's path, from PATH or pyenv's versions
    for c in "$(command -v "python$1" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1"; do
        [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys' 2>/dev/null && { echo "$c"; return 0; }
    done
    return 1
}

stamp=$(cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
ran=0 failed="" skipped="" passed=""
[ $# -gt 0 ] || set -- 3.10 3.11 3.13
for v in "$@"; do
    if ! py=$(find_python "$v"); then
        echo "test-pythons: Python $v not found (neither python$v on PATH nor under pyenv): skipped"
        skipped="$skipped $v"
        continue
    fi
    venv=.venv-py$v
    # make test's own environment when it is this version (the same install; no second gigabyte)
    if [ -f .venv/.done ] && [ "$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$v" ]; then
        venv=.venv
    elif [ ! -f "$venv/.done-$stamp" ]; then
        echo "test-pythons: $venv from $py (once per pyproject.toml/constraints.txt)"
        rm -rf "$venv"
        if ! { "$py" -m venv "$venv" &&
            "$venv/bin/pip" install -q --disable-pip-version-check -c constraints.txt -e '.[all,dev]'; }; then
            failed="$failed $v(install)"
            continue
        fi
        touch "$venv/.done-$stamp"
    fi
    echo "test-pythons: Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())')"
    ran=$((ran + 1))
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
    if "$venv/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests --ignore=tests/benchmarks}; then
        passed="$passed $v"
    else
        failed="$failed $v"
    fi
done
echo "test-pythons: passed:${passed:- none}; failed:${failed:- none}; skipped (not found):${skipped:- none}"
[ -z "$failed" ] || exit 1
[ "$ran" -gt 0 ] || exit 2
exit 0
