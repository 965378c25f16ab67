#!/bin/sh
# Prints the state a preflight must not change: every path (type, mode, owner, size, link
# target) under the configuration and data directories, the content hash of every
# configuration file, the installed packages and the unit files. Run before converge and
# again in verify; the two outputs must be equal on a host the preflight stopped.
set -eu
{
    find /etc /usr/local /opt /srv /var/lib -xdev \
        \( -path /var/lib/docker -o -path /var/lib/containerd -o -path /var/lib/systemd \) -prune \
        -o -printf 'path %p %y %m %u:%g %s %l\n'
    find /etc /usr/local /opt /srv -xdev -type f -exec sha256sum {} +
    dpkg-query -W -f 'package ${Package} ${Version} ${Status}\n'
    systemctl list-unit-files --no-legend --no-pager | sed 's/^/unit /'
} | LC_ALL=C sort
