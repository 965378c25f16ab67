#!/usr/bin/env bash
# `make demo`: three simulated DGX Sparks (the fleet Molecule scenario's platforms; fleet-1 is also
# the gateway, the image cache and Prometheus) provisioned by the site playbook, then the fleet's
# status table, one request answered by each box and one through the gateway, and the fleet's
# console on this machine (with its screenshot).
# `make demo-clean` (this script with `clean`) removes them. Molecule keeps its state in
# DEMO_STATE (default .demo/ in the checkout), so that both find the same boxes.
#
#   tests/testbed/demo.sh          # up (again: a re-run converges, changing nothing)
#   tests/testbed/demo.sh show     # the status table and one request per box again
#   tests/testbed/demo.sh clean    # down
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export MOLECULE_EPHEMERAL_DIRECTORY=${DEMO_STATE:-$root/.demo}
inventory=$MOLECULE_EPHEMERAL_DIRECTORY/inventory
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# The console's port on this machine (tests/testbed/forward.py: `ssh -L` for a simulated box).
console_port=${DEMO_CONSOLE_PORT:-19090}
forward_pid=$MOLECULE_EPHEMERAL_DIRECTORY/console-forward.pid
stop_forward() {
    if [ -s "$forward_pid" ]; then kill "$(cat "$forward_pid")" 2>/dev/null || true; rm -f "$forward_pid"; fi
}

if [ "${1:-}" = clean ]; then
    stop_forward
    molecule destroy -s fleet
    rm -rf "$MOLECULE_EPHEMERAL_DIRECTORY"
    exit 0
fi

converge_s=
if [ "${1:-}" != show ]; then
    say "Simulated Sparks: create, prepare (the test bed's image is built once, cached by hash)"
    molecule create -s fleet
    molecule prepare -s fleet --force
    say "The site playbook against them (ansible-playbook site.yml)"
    start=$SECONDS
    molecule converge -s fleet
    converge_s=" (site playbook: $((SECONDS - start)) s)"
fi

hosts=$(ansible-inventory -i "$inventory" --list | python3 -c '
import json, sys
print(" ".join(json.load(sys.stdin).get("spark", {}).get("hosts", [])))')

say "The fleet's status (ansible-playbook playbooks/status.yml)"
ANSIBLE_PIPELINING=true ansible-playbook -i "$inventory" playbooks/status.yml \
    -e status_json_path="$MOLECULE_EPHEMERAL_DIRECTORY/sparkfleet-status.json"

# One chat completion asked on a box (ask BOX KEY URL BODY [CURL ARGS...]): the reply's text, or
# why there is none. The key goes to curl on stdin (a header file), not on a command line.
ask() {
    local box=$1 key=$2 url=$3 body=$4 answer
    shift 4
    answer=$(printf 'Authorization: Bearer %s\n' "$key" | docker exec -i "$box" curl -sS --max-time 60 \
        "$@" -H @- -H 'Content-Type: application/json' -d "$body" "$url")
    python3 -c '
import json, sys
try:
    print(json.loads(sys.stdin.read())["choices"][0]["message"]["content"])
except (ValueError, KeyError, IndexError, TypeError) as exc:
    print(f"no answer ({exc!r})")' <<<"$answer"
}

say "One request answered by each box (POST /v1/chat/completions on the box)"
for host in $hosts; do
    vars=$(ansible-inventory -i "$inventory" --host "$host")
    key=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("vllm_api_key", ""))' <<<"$vars")
    port=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("vllm_port", 8000))' <<<"$vars")
    # The served name as the status playbook reported it (the vllm role's published record).
    served=$(python3 -c 'import json, sys
rows = {row["host"]: row for row in json.load(open(sys.argv[1]))["hosts"]}
print(rows.get(sys.argv[2], {}).get("served_model_name") or "qwen3.5-35b")' \
        "$MOLECULE_EPHEMERAL_DIRECTORY/sparkfleet-status.json" "$host")
    body=$(printf '{"model": "%s", "max_tokens": 32, "messages": [{"role": "user", "content": "Hello from %s"}]}' \
        "$served" "$host")
    printf '  %-10s %s\n' "$host:" "$(ask "$host" "$key" "http://127.0.0.1:$port/v1/chat/completions" "$body")"
done

# The gateway (roles/gateway): HTTPS with its own certificate, its own key, any box behind it.
gateways=$(ansible-inventory -i "$inventory" --list | python3 -c '
import json, sys
print(" ".join(json.load(sys.stdin).get("gateway", {}).get("hosts", [])))')
for gateway in $gateways; do
    vars=$(ansible-inventory -i "$inventory" --host "$gateway")
    read -r key port cert < <(python3 -c 'import json, sys; v = json.load(sys.stdin)
print(v.get("gateway_api_key", ""), v.get("gateway_port", 8080), v.get("gateway_tls_certificate", ""))' <<<"$vars")
    body=$(printf '{"model": "qwen3.5-35b", "max_tokens": 32, "messages": [{"role": "user", "content": "Hello through %s"}]}' \
        "$gateway")
    printf '  %-10s %s\n' "gateway:" \
        "$(ask "$gateway" "$key" "https://127.0.0.1:$port/v1/chat/completions" "$body" --cacert "$cert")"
done

# The console (roles/monitoring: Prometheus's console template on the monitoring host, 127.0.0.1:9090 there,
# as on a real box), reached from this machine through tests/testbed/forward.py, and its screenshot when
# Chromium is installed (.ci/setup installs it).
console="" screenshot=""
monitor=$(ansible-inventory -i "$inventory" --list | python3 -c '
import json, sys
print((json.load(sys.stdin).get("monitoring", {}).get("hosts") or [""])[0])')
if [ -n "$monitor" ]; then
    stop_forward
    setsid python3 tests/testbed/forward.py "127.0.0.1:$console_port" "$monitor" 9090 \
        >"$MOLECULE_EPHEMERAL_DIRECTORY/console-forward.log" 2>&1 </dev/null &
    echo $! >"$forward_pid"
    console="http://127.0.0.1:$console_port/consoles/sparkfleet.html"
    say "The fleet's console ($console, Prometheus on $monitor)"
    for _ in $(seq 1 50); do curl -fsS -o /dev/null "$console" 2>/dev/null && break; sleep 0.2; done
    chromium=$(command -v chromium || command -v chromium-browser || true)
    if [ -n "$chromium" ]; then
        screenshot=$MOLECULE_EPHEMERAL_DIRECTORY/console.png
        "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1400 \
            --virtual-time-budget=8000 --screenshot="$screenshot" "$console" >/dev/null 2>&1 || screenshot=""
    fi
    echo "  console:    $console"
    echo "  screenshot: ${screenshot:-none (chromium is not installed)}"
fi

first=${hosts%% *}
cat <<EOF

Up: ${hosts// /, }${converge_s}. The boxes are containers, vLLM in them is a stand-in.
  log in:     docker exec -it $first bash          (or: MOLECULE_EPHEMERAL_DIRECTORY=$MOLECULE_EPHEMERAL_DIRECTORY molecule login -s fleet -h $first)
  re-run:     make demo                            (converges again: nothing changes)
              tests/testbed/demo.sh show           (this table and the requests again)
              ansible-playbook -i $inventory site.yml
  status:     ansible-playbook -i $inventory playbooks/status.yml
  benchmark:  ansible-playbook -i $inventory playbooks/benchmark.yml -e benchmark_num_prompts=16
  console:    ${console:-none (no monitoring host)}${screenshot:+   (screenshot: $screenshot)}
  tear down:  make demo-clean
EOF
