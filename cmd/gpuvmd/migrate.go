package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gpuvm/gpuvm/pkg/store"
)

const migrateDBUsage = `Usage: gpuvmd migrate-db --from sqlite:PATH --to postgres://USER@HOST/DB

Copies every table of a single server's SQLite database into an empty
PostgreSQL database, in one transaction: afterwards the server (and more
servers) run on PostgreSQL with database { driver = "postgres" }. Stop
gpuvmd first. Both databases are brought to this gpuvmd's schema version.
A target that already holds gpuvm data is refused, so it never runs twice.

`

// runMigrateDB is "gpuvmd migrate-db": the move of one server from SQLite
// to PostgreSQL (README, "Operations").
func runMigrateDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuvmd migrate-db", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, migrateDBUsage)
		fs.PrintDefaults()
	}
	from := fs.String("from", "", "the SQLite database to copy: sqlite:PATH (the server's state_dir/gpuvm.db)")
	to := fs.String("to", "", "the empty PostgreSQL database to copy into: postgres://USER@HOST:5432/DB")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("migrate-db: unexpected argument %q (it takes --from and --to)", fs.Arg(0))
	}
	path, err := sqlitePath(*from)
	if err != nil {
		return err
	}
	switch {
	case *to == "":
		return errors.New("migrate-db: --to is required: the PostgreSQL database to copy into (postgres://USER@HOST:5432/DB)")
	case !strings.HasPrefix(*to, "postgres://") && !strings.HasPrefix(*to, "postgresql://"):
		return fmt.Errorf("migrate-db: --to must be a postgres:// URL, not %q", redactDSN(*to))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := store.Open(ctx, store.Config{Driver: store.DriverSQLite, DSN: path, Logger: log})
	if err != nil {
		return fmt.Errorf("migrate-db: open the SQLite database %s: %w", path, err)
	}
	defer src.Close()
	dst, err := store.Open(ctx, store.Config{Driver: store.DriverPostgres, DSN: *to, Logger: log})
	if err != nil {
		return fmt.Errorf("migrate-db: open the PostgreSQL database %s: %w", redactDSN(*to), err)
	}
	defer dst.Close()
	counts, err := src.CopyInto(ctx, dst)
	if err != nil {
		return fmt.Errorf("migrate-db: %w", err)
	}
	version, _ := dst.CurrentSchemaVersion(ctx)
	fmt.Fprintf(stdout, "Copied %s into %s (schema version %d):\n", path, redactDSN(*to), version)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var total int64
	for _, c := range counts {
		fmt.Fprintf(tw, "  %s\t%d\n", c.Table, c.Rows)
		total += c.Rows
	}
	fmt.Fprintf(tw, "  total\t%d\n", total)
	_ = tw.Flush()
	fmt.Fprintf(stdout, `Next: in the server block write
  database {
    driver = "postgres"
    dsn    = "%s"
  }
and start gpuvmd. Keep %s as the backup of the moment of the move.
`, redactDSN(*to), path)
	return nil
}

// sqlitePath reads --from: sqlite:PATH (or a bare path) of a database that
// exists: opening a missing one would make an empty database and copy it.
func sqlitePath(from string) (string, error) {
	if from == "" {
		return "", errors.New("migrate-db: --from is required: the SQLite database to copy (sqlite:/var/lib/gpuvm/gpuvm.db)")
	}
	if strings.HasPrefix(from, "postgres://") || strings.HasPrefix(from, "postgresql://") {
		return "", errors.New("migrate-db: --from is the SQLite database (sqlite:PATH); copying from PostgreSQL is what pg_dump does")
	}
	path := strings.TrimPrefix(from, "sqlite:")
	if path == "" {
		return "", errors.New("migrate-db: --from sqlite: needs a path")
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("migrate-db: --from: no SQLite database at %s: %w", path, err)
	case fi.IsDir():
		return "", fmt.Errorf("migrate-db: --from: %s is a directory; name the database file (state_dir/gpuvm.db)", path)
	}
	return path, nil
}

// redactDSN hides the password of a postgres:// URL.
func redactDSN(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return dsn
	}
	user, _, hasPassword := strings.Cut(userinfo, ":")
	if !hasPassword {
		return dsn
	}
	return scheme + "://" + user + ":xxxxx@" + host
}
