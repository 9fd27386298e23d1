# Sourced by scripts/test and scripts/run: make ./.venv and install shmq into it (editable)
# when it is missing or when pyproject.toml, setup.py or the C core changed since the last install.
VENV="${SHMQ_VENV:-$PWD/.venv}"
ensure_venv() {
    local extra="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel cffi
    fi
    local stamp="$VENV/.shmq-installed-$extra"
    local digest
    digest=$(cat pyproject.toml setup.py shmq/native/*.c shmq/native/*.h shmq/native/_build.py | sha1sum | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
        "$VENV/bin/python" -m pip install -q --no-build-isolation -e ".[$extra]"
        echo "$digest" > "$stamp"
    fi
}

# Installs the npm packages the third-party client tests drive (tests/thirdparty/package.json:
# ali-ons) when they are missing or package.json changed. Without node/npm, or when the install
# fails, those tests skip and say why; nothing else depends on them. package-lock=false is set in
# tests/thirdparty/.npmrc, so no lock file (nor anything naming a registry) is written.
ensure_node_deps() {
    local dir="tests/thirdparty"
    [ -f "$dir/package.json" ] || return 0
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "note: node/npm not found: third-party client tests will be skipped" >&2
        return 0
    fi
    local stamp="$dir/node_modules/.shmq-installed"
    if [ ! -f "$stamp" ] || [ "$dir/package.json" -nt "$stamp" ]; then
        if (cd "$dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >&2); then
            touch "$stamp"
        else
            echo "warning: npm install in $dir failed: third-party client tests will be skipped" >&2
        fi
    fi
}
