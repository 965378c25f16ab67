#!/bin/sh
# The firewall role's probe (tasks/plan.yml runs it as root with `sh -c`; $1 is
# firewall_sshd_binary). Its format and why there is one: the sparkfleet.serving.probe_sections
# filter's documentation (plugins/filter/probe_sections.yml). Read-only: it changes nothing.
section() { _probe_name=$1; shift; _probe_out=$("$@" 2>&1); printf '### sparkfleet.serving probe: %s rc=%s\n%s\n' "$_probe_name" "$?" "$_probe_out"; }
sshd=$1

# SSH_CONNECTION ("client_ip client_port server_ip server_port", ssh(1) ENVIRONMENT) is set by
# sshd for the login session. sudo leaves it out of root's environment, but the processes
# this one runs under (sudo itself, the login shell) were started with it: the nearest
# process that has it tells. None has it over `docker exec` or a local connection.
ssh_connection() {
    pid=$$
    while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
        found=$( (tr '\0' '\n' < "/proc/$pid/environ") 2>/dev/null | sed -n 's/^SSH_CONNECTION=//p' | head -n 1)
        if [ -n "$found" ]; then
            printf '%s\n' "$found"
            return
        fi
        pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
    done
}
# $$ in a command substitution is still the script's own process, whose parents tell.
section ssh_connection ssh_connection

# sshd's effective configuration (its `port` lines), or why it cannot tell.
section sshd "$sshd" -T

# The files the role edits (the last: the drop-in that starts Docker after ufw at boot), as base64 (their bytes exactly); rc 1: the file is not there.
for file in /etc/ufw/after.rules /etc/ufw/after6.rules /etc/default/ufw \
        /etc/systemd/system/docker.service.d/sparkfleet-firewall.conf; do
    if [ -f "$file" ]; then
        section "file $file" base64 -w 0 "$file"
    else
        section "file $file" false
    fi
done

# ufw's own view, when it is installed (rc 127 of the first section: it is not).
if [ -e /usr/sbin/ufw ]; then
    section ufw ufw status verbose
    section added ufw show added
else
    section ufw sh -c 'exit 127'
fi
