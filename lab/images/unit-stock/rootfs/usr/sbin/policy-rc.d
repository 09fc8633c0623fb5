#!/bin/sh
# specfleet lab STOCK unit (an EMULATED Jetson, a container without systemd).
#
# Why this file exists: on a real JetPack unit, installing docker.io starts dockerd
# (systemd). Here the package's postinst calls `invoke-rc.d docker start`, and invoke-rc.d,
# finding no init system (/sbin/init) and no policy-rc.d, BLOCKS every start ("No init
# system and policy-rc.d missing! Defaulting to block."): Docker would be installed but
# not running. So: allow docker (0), the unit's dockerd then runs as on a real unit and
# specfleet-lab-init restarts it if it dies. Deny everything else (101): sshd is
# supervised by specfleet-lab-init, and `invoke-rc.d ssh restart` from an upgrade would
# replace it with a daemon nothing watches.
# Usage (invoke-rc.d's): policy-rc.d [--quiet] <initscript ID> <actions> [<runlevel>]
for arg in "$@"; do
    case "$arg" in
        -*) continue ;;
        docker) exit 0 ;;
        *) exit 101 ;;
    esac
done
exit 101
