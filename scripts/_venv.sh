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
