package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/gpuvm/gpuvm/pkg/store"
)

const joinUsage = `usage: gpuvmd join-installation [--state-dir DIR] [--config DIR] [--database DSN] ID

Makes a database that holds no VM part of installation ID: for a host whose
database was lost without a backup. Until then gpuvmd reports that
installation's domains and devices as another installation's, which can only
be deleted; once joined, they are this installation's orphans, and
'gpuvm admin orphans adopt' makes them VMs again. ID is the one
'gpuvm admin orphans' shows for them. Run it with gpuvmd stopped.

`

// runJoinInstallation is gpuvmd join-installation.
func runJoinInstallation(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuvmd join-installation", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, joinUsage)
		fs.PrintDefaults()
	}
	var o options
	o.stateFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("join-installation: give the installation ID (one argument)")
	}
	id := fs.Arg(0)
	if _, err := o.loadConfigFiles(fs, getenv, stderr); err != nil {
		return err
	}
	st, err := store.Open(ctx, o.storeConfig(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return fmt.Errorf("join-installation: open the database: %w", err)
	}
	defer st.Close()
	before, err := st.Installation(ctx)
	if err != nil {
		return fmt.Errorf("join-installation: %w", err)
	}
	if err := st.JoinInstallation(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "The database is now installation %s (it was %s). Start gpuvmd: that installation's domains and devices show in 'gpuvm admin orphans' as adoptable.\n", id, before.ID)
	return nil
}
