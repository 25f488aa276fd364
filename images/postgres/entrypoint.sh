#!/bin/sh
# Entrypoint of Tenure's locally built PostgreSQL test images (see build.sh next to it).
#
# It honours the subset of the official postgres image's interface that testcontainers'
# Postgres module uses: POSTGRES_USER (default postgres), POSTGRES_PASSWORD, POSTGRES_DB
# (default: the user's name), POSTGRES_HOST_AUTH_METHOD (default scram-sha-256), and a command
# of server options (`-c fsync=off`), which it hands to `postgres`.
#
# As the official image does, it initializes an empty $PGDATA with a temporary server whose log
# goes to stdout, then runs the real server in the foreground with its log on stderr: the
# module waits for "database system is ready to accept connections" on stderr, then on stdout.
set -eu

if [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
	exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
		echo "entrypoint: set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust" >&2
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "${POSTGRES_PASSWORD:-}" > "$pwfile"
	initdb --username="$user" --pwfile="$pwfile" --auth-local=trust \
		--auth-host="$auth" --encoding=UTF8 --no-instructions >/dev/null
	rm -f "$pwfile"
	echo "host all all all $auth" >> "$PGDATA/pg_hba.conf"
	echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"

	# The temporary server listens on the socket only; its log goes to stdout.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start 2>&1
	if [ "$db" != postgres ]; then
		echo 'CREATE DATABASE :"db"' | psql -v ON_ERROR_STOP=1 --quiet \
			--username="$user" --dbname=postgres --set db="$db"
	fi
	pg_ctl -D "$PGDATA" -m fast -w stop 2>&1
	echo "entrypoint: PostgreSQL init process complete; ready for start up"
fi

exec "$@" 1>&2
