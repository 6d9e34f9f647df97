# Sourced by scripts/install and scripts/test (from the repository root): finding Python and
# making the venv, and putting the npm agent CLIs where `forge-record` finds them.

# The npm agent CLIs the real-CLI tests drive, at the versions they were checked with.
NPM_CLIS=(@anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 @google/gemini-cli@0.61.0
          opencode-ai@1.18.33 @qwen-code/qwen-code@0.24.4)
CLI_BINS=(claude codex gemini opencode qwen)
NPM_PREFIX=.cache/npm

say() { printf '== %s\n' "$*"; }
die() { printf '%s\n' "$*" >&2; exit 1; }

# A Python >= 3.12: $PYTHON if set, else python3.12, python3.13, python3.14, python3.
find_python() {
    local candidate
    for candidate in ${PYTHON:+"$PYTHON"} python3.12 python3.13 python3.14 python3; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    local found
    found=$(python3 --version 2>/dev/null || echo "no python3")
    die "forge-record needs Python 3.12 or newer (found: $found); install python3.12 and python3.12-venv (Debian/Ubuntu) or run 'uv python install 3.12', then run this again, or set PYTHON=/path/to/python3.12"
}

# .venv made with Python $1 (remade if it holds an older one).
make_venv() {
    local python=$1
    if [ -x .venv/bin/python ] && ! .venv/bin/python -c \
            'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        say "remaking .venv: it holds $(.venv/bin/python --version 2>&1)"
        rm -rf .venv
    fi
    if [ ! -x .venv/bin/python ]; then
        "$python" -m venv .venv 2>/dev/null \
            || die "forge-record: $python cannot make a venv; install python3.12-venv (Debian/Ubuntu), then run this again"
    fi
}

# The npm CLIs in $NPM_PREFIX, linked into .venv/bin: one directory on PATH gives
# forge-record and the agents (`forge-record doctor claude`, `forge-record demo`).
link_clis() {
    local bin
    for bin in "${CLI_BINS[@]}"; do
        if [ -e "$NPM_PREFIX/node_modules/.bin/$bin" ]; then
            ln -sf "$PWD/$NPM_PREFIX/node_modules/.bin/$bin" ".venv/bin/$bin"
        fi
    done
}
