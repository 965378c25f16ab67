#!/bin/sh
# The firewall role's one read of the box (tasks/plan.yml runs it as root with `sh -c`, $1 is
# firewall_sshd_binary). Each section starts with a line "### sparkfleet.serving.firewall
# probe: NAME"; plugins/plugin_utils/firewall_state.py (parse_probe) splits them. Files come as
# base64 on one line so that their bytes come back exactly. Read-only: it changes nothing.
sshd=$1
mark() { printf '### sparkfleet.serving.firewall probe: %s\n' "$1"; }

# SSH_CONNECTION ("client_ip client_port server_ip server_port", ssh(1) ENVIRONMENT) is set by
# sshd for the login session. sudo leaves it out of root's environment, but the processes
# this one runs under (sudo itself, the login shell) were started with it: the nearest
# process that has it tells. None has it over `docker exec` or a local connection.
mark ssh_connection
pid=$$
while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    found=$( (tr '\0' '\n' < "/proc/$pid/environ") 2>/dev/null | sed -n 's/^SSH_CONNECTION=//p' | head -n 1)
    if [ -n "$found" ]; then
        printf '%s\n' "$found"
        break
    fi
    pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
done

# sshd's effective configuration (its `port` lines); on failure its message, for the error
# that names why no SSH rule can be made.
mark sshd
exec 3>&1
error=$("$sshd" -T 2>&1 1>&3)
rc=$?
mark sshd_rc
echo "$rc"
mark sshd_error
printf '%s\n' "$error"

for file in /etc/ufw/after.rules /etc/ufw/after6.rules /etc/default/ufw; do
    mark "file $file"
    if [ -f "$file" ]; then
        base64 -w 0 "$file" || exit
        echo
    fi
done

# ufw's own view, when it is installed: a ufw that cannot answer fails the task here.
mark ufw
if [ -e /usr/sbin/ufw ]; then
    echo /usr/sbin/ufw
    mark status
    ufw status verbose || exit
    mark added
    ufw show added || exit
fi
