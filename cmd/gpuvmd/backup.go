package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backup"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

const backupUsage = `Usage: gpuvmd backup --to FILE [--config DIR] [--state-dir DIR] [--database DB]

Writes one archive (gzip-compressed tar, mode 0600) of this server: a
consistent copy of its SQLite database, taken while gpuvmd runs, and the
backend ledgers of the state directory. manifest.json, its first entry,
names the installation, the schema version and every file with its size
and SHA-256. The admin token and other secrets are not in it. On
PostgreSQL the archive holds the ledgers, and the database is dumped with
pg_dump (the command is printed). The state directory and the database
are found as gpuvmd finds them (flags, then the configuration).

`

// runBackup is "gpuvmd backup" (README, "Operations").
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuvmd backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, backupUsage)
		fs.PrintDefaults()
	}
	var o options
	o.stateFlags(fs)
	to := fs.String("to", "", "the archive to write (replaced if it exists), e.g. /backups/gpuvm-$(date -u +%Y%m%dT%H%M%SZ).tar.gz")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("backup: unexpected argument %q (it takes --to FILE)", fs.Arg(0))
	}
	if *to == "" {
		return errors.New("backup: --to FILE is required: the archive to write")
	}
	if _, err := o.loadConfigFiles(fs, getenv, stderr); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	bo, err := backupOptions(ctx, o, log)
	if err != nil {
		return err
	}
	m, err := backup.Create(ctx, *to, bo)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "Wrote %s:\n", *to)
	printManifest(stdout, m)
	if m.Database.Driver == store.DriverPostgres {
		fmt.Fprintf(stdout, "\nThe database is PostgreSQL and is NOT in this archive. %s\n", m.Database.Note)
	}
	return nil
}

// backupOptions says what to back up: the state directory and the
// database gpuvmd would open with these options.
func backupOptions(ctx context.Context, o options, log *slog.Logger) (backup.Options, error) {
	sc := o.storeConfig(log)
	bo := backup.Options{StateDir: o.stateDir, Driver: sc.Driver, Version: version}
	switch sc.Driver {
	case store.DriverSQLite:
		if _, err := os.Stat(sc.DSN); err != nil {
			return bo, fmt.Errorf("backup: no SQLite database at %s (--state-dir, --database or the configuration's database block say where it is): %w", sc.DSN, err)
		}
		bo.SQLitePath = sc.DSN
	case store.DriverPostgres:
		bo.PostgresNote = pgDumpHint(sc.DSN, time.Now())
		ictx, cancel := context.WithTimeout(ctx, 15*time.Second)
		info, err := store.Inspect(ictx, sc)
		cancel()
		if err != nil {
			log.Warn("backup: could not read the PostgreSQL database; the manifest names no installation", "err", err)
		} else {
			bo.Postgres = &info
		}
	}
	return bo, nil
}

// pgDumpHint is what to run to back up a PostgreSQL database, and to
// restore it.
func pgDumpHint(dsn string, now time.Time) string {
	dump := "gpuvm-" + now.UTC().Format("20060102T150405Z") + ".pgdump"
	shown, schema := pgDumpTarget(dsn)
	if schema != "" {
		schema = " --schema '" + schema + "'"
	}
	return fmt.Sprintf(`Dump it with pg_dump, in the custom format, at the same time:
  pg_dump -Fc --dbname '%s'%s --file %s
Restore it into a new, empty database (never over the live one):
  sudo -u postgres createdb -O gpuvm gpuvm_restored
  pg_restore --no-owner --exit-on-error --dbname 'postgres://gpuvm@HOST/gpuvm_restored' %s
(Give the password as PGPASSWORD or in ~/.pgpass, not in the URL.)`, shown, schema, dump, dump)
}

// pgDumpTarget is a DSN as pg_dump takes it: without its password (which
// is not to be printed), and without search_path, which libpq does not
// take in a URL: it is returned as the schema to dump.
func pgDumpTarget(dsn string) (string, string) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return redactDSN(dsn), ""
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String(), schema
}

func printManifest(w io.Writer, m *backup.Manifest) {
	inst := m.InstallationID
	if inst == "" {
		inst = "(unknown)"
	}
	fmt.Fprintf(w, "  installation    %s\n  schema version  %d\n  database        %s\n  made            %s by gpuvmd %s\n",
		inst, m.SchemaVersion, m.Database.Driver, m.CreatedAt.Format(time.RFC3339), m.GpuvmVersion)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range m.Files {
		fmt.Fprintf(tw, "  %s\t%s\t%d bytes\tsha256:%s\n", f.Name, f.Kind, f.Size, f.SHA256[:16])
	}
	_ = tw.Flush()
}

func printCounts(w io.Writer, tables []store.TableCount) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range tables {
		fmt.Fprintf(tw, "  %s\t%d\n", c.Table, c.Rows)
	}
	_ = tw.Flush()
}

const restoreUsage = `Usage: gpuvmd restore --from FILE [--state-dir DIR] [--config DIR] [--database PATH] [--force]

Restores an archive of gpuvmd backup on a machine where gpuvmd is not
running. It reads the whole archive and checks the manifest and every
file's SHA-256 before it writes anything; a truncated or altered archive is
refused, naming the bad file, and so is one of a newer schema version than
this gpuvmd knows. A state directory that holds a database or ledgers
already is refused; --force moves them into STATE_DIR/before-restore-TIME/
(nothing is deleted).

`

// runRestore is "gpuvmd restore".
func runRestore(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuvmd restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, restoreUsage)
		fs.PrintDefaults()
	}
	var o options
	o.stateFlags(fs)
	from := fs.String("from", "", "the archive to restore")
	force := fs.Bool("force", false, "move an existing database aside to STATE_DIR/before-restore-TIME/ instead of refusing (ledgers already there are kept)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("restore: unexpected argument %q (it takes --from FILE)", fs.Arg(0))
	}
	if *from == "" {
		return errors.New("restore: --from FILE is required: the archive of gpuvmd backup")
	}
	if _, err := o.loadConfigFiles(fs, getenv, stderr); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sc := o.storeConfig(log)
	target := backup.Target{StateDir: o.stateDir, Force: *force}
	if sc.Driver == store.DriverSQLite {
		target.SQLitePath = sc.DSN
	}
	res, err := backup.Restore(ctx, *from, target)
	if res != nil && res.Aside != "" {
		fmt.Fprintf(stdout, "Moved aside to %s:\n", res.Aside)
		for _, p := range res.Moved {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	m := res.Manifest
	fmt.Fprintf(stdout, "Restored %s (made %s by gpuvmd %s):\n", *from, m.CreatedAt.Format(time.RFC3339), m.GpuvmVersion)
	for _, p := range res.Written {
		fmt.Fprintf(stdout, "  %s\n", p)
	}
	if len(res.Kept) > 0 {
		fmt.Fprintf(stdout, "Kept as they were (they record what the backends made on this host's GPUs up to now):\n")
		for _, p := range res.Kept {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if m.Database.File == "" {
		fmt.Fprintf(stdout, "\nThe archive holds no database: it was on PostgreSQL (installation %s, schema version %d). Restore the pg_dump of the same time with pg_restore into a new database and point database { driver = \"postgres\" dsn = \"…\" } at it (README, \"Operations\").\n",
			orUnknown(m.InstallationID), m.SchemaVersion)
	} else {
		st, err := store.Open(ctx, sc)
		if err != nil {
			return fmt.Errorf("restore: open the restored database %s: %w", sc.DSN, err)
		}
		info, err := st.Info(ctx)
		st.Close()
		if err != nil {
			return fmt.Errorf("restore: read the restored database: %w", err)
		}
		if m.InstallationID != "" && info.Installation.ID != m.InstallationID {
			return fmt.Errorf("restore: the restored database is installation %s, the manifest says %s", info.Installation.ID, m.InstallationID)
		}
		migrated := ""
		if info.SchemaVersion != m.SchemaVersion {
			migrated = fmt.Sprintf(" (migrated from %d)", m.SchemaVersion)
		}
		fmt.Fprintf(stdout, "\n  installation    %s\n  schema version  %d%s\n", info.Installation.ID, info.SchemaVersion, migrated)
		printCounts(stdout, info.Tables)
	}
	fmt.Fprintf(stdout, `
Next: start gpuvmd: VMs whose domains exist continue; the rest are reported as orphans or vanished, nothing is deleted.
Then gpuvm admin orphans lists what the host has that the restored database does not (adopt or delete each).
A data disk the restored database has but its pool does not keeps its row, its error saying the file is missing (gpuvm volume ls).
The admin token file (%s) is never in a backup: the tokens in the database work as before; keep your own copy of the admin's.
`, filepath.Join(o.stateDir, "admin.token"))
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// backupScheduler runs the backups of server.backup while gpuvmd serves.
type backupScheduler struct {
	settings func() *config.Backup // read before each run: a reload applies
	opts     func(ctx context.Context) (backup.Options, error)
	now      func() time.Time
	log      *slog.Logger
	observe  func(at time.Time, err error) // the metrics; may be nil
}

// retryAfter is the longest wait before a failed scheduled backup is
// tried again.
const retryAfter = time.Hour

// run backs up at each due time until ctx ends, or the backup block is
// gone from the configuration.
func (s *backupScheduler) run(ctx context.Context) {
	var failedAt time.Time
	for {
		set := s.settings()
		if set == nil {
			s.log.Info("scheduled backups stop: the configuration has no backup block any more")
			return
		}
		next := s.due(set, failedAt)
		s.log.Info("next scheduled backup", "at", next.Format(time.RFC3339), "dir", set.Dir, "every", set.Every, "keep", set.Keep)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		cur := s.settings()
		if cur == nil {
			continue
		}
		failedAt = time.Time{}
		if _, err := s.runOnce(ctx, cur); err != nil {
			failedAt = s.now()
		}
	}
}

// due is when the next backup is: every after the newest archive
// (backup.NextRun), but after a failure not before min(every, retryAfter)
// has passed.
func (s *backupScheduler) due(set *config.Backup, failedAt time.Time) time.Time {
	now := s.now()
	next, err := backup.NextRun(set.Dir, set.Every, now)
	if err != nil {
		s.log.Error("scheduled backup: cannot list the earlier backups", "dir", set.Dir, "err", err)
	}
	if !failedAt.IsZero() {
		if retry := failedAt.Add(min(set.Every, retryAfter)); next.Before(retry) {
			next = retry
		}
	}
	return next
}

// runOnce makes one scheduled backup in set.Dir, then prunes the archives
// beyond set.Keep. Each run is logged; a failed one at error level.
func (s *backupScheduler) runOnce(ctx context.Context, set *config.Backup) (string, error) {
	start := s.now()
	path, m, err := s.make(ctx, set, start)
	took := s.now().Sub(start)
	if s.observe != nil {
		s.observe(start, err)
	}
	if err != nil {
		s.log.Error("scheduled backup failed", "dir", set.Dir, "err", err, "took", took)
		return path, err
	}
	var size int64
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}
	removed, perr := backup.Prune(set.Dir, set.Keep)
	s.log.Info("scheduled backup written", "path", path, "bytes", size, "files", len(m.Files), "database", m.Database.Driver,
		"installation", m.InstallationID, "schema_version", m.SchemaVersion, "took", took, "pruned", removed, "keep", set.Keep)
	if m.Database.Driver == store.DriverPostgres {
		s.log.Warn("scheduled backup: the PostgreSQL database is not in the archive; dump it with pg_dump -Fc (README, \"Operations\")", "path", path)
	}
	if perr != nil {
		s.log.Error("scheduled backup: pruning old archives failed", "dir", set.Dir, "err", perr)
	}
	return path, nil
}

func (s *backupScheduler) make(ctx context.Context, set *config.Backup, at time.Time) (string, *backup.Manifest, error) {
	if err := os.MkdirAll(set.Dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create the backup directory: %w", err)
	}
	path := filepath.Join(set.Dir, backup.ScheduledName(at))
	if _, err := os.Lstat(path); err == nil {
		return path, nil, fmt.Errorf("%s exists already", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return path, nil, fmt.Errorf("look at %s: %w", path, err)
	}
	bo, err := s.opts(ctx)
	if err != nil {
		return path, nil, err
	}
	bo.Now = func() time.Time { return at }
	m, err := backup.Create(ctx, path, bo)
	if err != nil {
		return path, nil, err
	}
	return path, m, nil
}

// newBackupScheduler is the scheduled backups when the configuration has a
// backup block (nil when it has none); its run returns when its context
// ends, after a run in progress.
func newBackupScheduler(o options, profiles func() *config.Config, log *slog.Logger, observe func(time.Time, error)) *backupScheduler {
	if profiles().Server.Backup == nil {
		return nil
	}
	return &backupScheduler{
		settings: func() *config.Backup { return profiles().Server.Backup },
		opts: func(ctx context.Context) (backup.Options, error) {
			return backupOptions(ctx, o, log)
		},
		now:     time.Now,
		log:     log.With("component", "backup"),
		observe: observe,
	}
}
