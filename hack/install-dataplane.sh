#!/usr/bin/env bash
# Installs what the simulated data plane runs (docs/dataplane.md): PostgreSQL 15 (server and client)
# and barman-cloud 3.4 (Debian's barman-cli-cloud, which brings python3-boto3). Does nothing when
# they are present; otherwise needs root (or sudo) and Debian's package archive.
set -euo pipefail
missing=()
[[ -x /usr/lib/postgresql/15/bin/postgres && -x /usr/lib/postgresql/15/bin/psql ]] || missing+=(postgresql-15 postgresql-client-15)
command -v barman-cloud-backup >/dev/null || missing+=(barman-cli-cloud)
/usr/bin/python3 -c 'import boto3' 2>/dev/null || missing+=(python3-boto3)
# etcd 3.4 (server, etcdctl) for the etcd-operator simulator's real member, snapshot and restore.
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
# MariaDB 10.11 (mariadbd, mariadb-install-db, mariadb, mariadb-dump) for the mariadb-operator simulator.
[[ -x /usr/sbin/mariadbd && -x /usr/bin/mariadb-install-db ]] || missing+=(mariadb-server)
[[ -x /usr/bin/mariadb && -x /usr/bin/mariadb-dump ]] || missing+=(mariadb-client)
((${#missing[@]} == 0)) && exit 0
# shellcheck source=hack/lib/apt-install.sh
source "$(dirname "$0")/lib/apt-install.sh"
apt_install "${missing[@]}"
