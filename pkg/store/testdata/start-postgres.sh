#!/usr/bin/env bash
# start-postgres.sh: make a PostgreSQL database ready for pkg/store's tests and
# print its DSN on stdout (everything else goes to stderr), so that
#
#   export GPUVM_TEST_POSTGRES_DSN="$(bash pkg/store/testdata/start-postgres.sh)"
#
# runs the store tests against PostgreSQL as well as SQLite.
#
# Idempotent: starts the Debian cluster when it is down, creates the role and
# the database when they are missing, and resets the role's password. Needs
# root (it runs psql as the postgres OS user) and Debian's postgresql-common
# (pg_lsclusters, pg_ctlcluster). The tests connect over TCP to 127.0.0.1 with
# a password because Debian's pg_hba.conf allows that (scram-sha-256) without
# edits; over the unix socket it only allows peer authentication, which would
# need an OS user named like the role.
#
# The role may create databases (CREATEDB): TestPgDumpRestore restores a
# pg_dump into a new database, as the README's operations part says to.
#
# Environment: GPUVM_TEST_PG_ROLE (gpuvm), GPUVM_TEST_PG_DB (gpuvm_test),
# GPUVM_TEST_PG_PASSWORD (gpuvm; a test-only database on localhost).
set -euo pipefail

role="${GPUVM_TEST_PG_ROLE:-gpuvm}"
db="${GPUVM_TEST_PG_DB:-gpuvm_test}"
password="${GPUVM_TEST_PG_PASSWORD:-gpuvm}"

log() { printf 'start-postgres: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (runs psql as the postgres user)"
command -v pg_lsclusters >/dev/null 2>&1 || die "PostgreSQL is not installed (apt-get install postgresql)"
[[ "$role" =~ ^[a-z_][a-z0-9_]*$ ]] || die "bad role name: $role"
[[ "$db" =~ ^[a-z_][a-z0-9_]*$ ]] || die "bad database name: $db"
[[ "$password" != *"'"* ]] || die "the password must not contain a quote"

# The newest cluster on this machine: "version name port status ...".
read -r ver name port status _ < <(pg_lsclusters --no-header | sort -V -k1,1 | tail -n 1) ||
	die "no PostgreSQL cluster (pg_createcluster 15 main)"
if [ "$status" != "online" ]; then
	log "starting cluster $ver/$name"
	pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2
fi

# From /: psql, as the postgres user, cannot enter a checkout it may not
# read (a clone in a 0700 mktemp directory) and would say so each time.
psql() { (cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$port" "$@"); }
for _ in $(seq 1 50); do
	psql -d postgres -c 'SELECT 1' >/dev/null 2>&1 && break
	sleep 0.2
done
psql -d postgres -c 'SELECT 1' >/dev/null || die "cluster $ver/$name does not answer on port $port"

psql -d postgres >&2 <<SQL
DO \$\$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$role') THEN
		CREATE ROLE $role LOGIN;
	END IF;
END
\$\$;
-- CREATEDB: the backup test restores a pg_dump into a database of its own.
ALTER ROLE $role LOGIN CREATEDB PASSWORD '$password';
SQL
if ! psql -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -qx 1; then
	log "creating database $db"
	psql -d postgres -c "CREATE DATABASE $db OWNER $role" >&2
fi
# Tests make one schema each; the role owns the database and its public schema.
psql -d "$db" -c "ALTER SCHEMA public OWNER TO $role" >&2

printf 'postgres://%s:%s@127.0.0.1:%s/%s?sslmode=disable\n' "$role" "$password" "$port" "$db"
