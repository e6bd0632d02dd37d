package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// openDirectory prepares the directory of server.auth.ldap (nil without
// one): its bind password and CA file are read now, and an unverified TLS
// is warned about at every start. A change of the block takes a restart.
func openDirectory(cfg *config.Config, log *slog.Logger) (*ldap.Directory, error) {
	l := cfg.Server.Auth.LDAP
	if l == nil {
		return nil, nil
	}
	d, err := ldap.New(*l, log)
	if err != nil {
		return nil, err
	}
	log.Info("password sign-in with a directory", "url", l.URL, "start_tls", l.StartTLS, "sync_every", l.SyncEvery)
	if !cfg.Server.Auth.Local.Enabled {
		log.Info("local users' tokens are refused but the break-glass admins'", "break_glass", cfg.Server.Auth.Local.BreakGlass)
	}
	return d, nil
}

// syncDirectory disables, every interval, the users who left the
// directory (and enables those back), and reports it through the API's
// audit log. A failed sync changes nothing and is tried at the next tick.
func syncDirectory(ctx context.Context, d *ldap.Directory, st *store.Store, srv *server.Server, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		changes, err := d.Sync(ctx, st)
		if err != nil && ctx.Err() == nil {
			log.Error("directory sync failed; nobody was disabled for it", "err", err)
		}
		srv.ReportDirectoryChanges(context.WithoutCancel(ctx), store.SourceLDAP, changes)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openOIDC prepares the OpenID provider of server.auth.oidc (nil without
// one), discovered at the first sign-in so that gpuvmd starts while it is
// down. A change of the block takes a restart.
func openOIDC(cfg *config.Config, log *slog.Logger) *oidc.Lazy {
	o := cfg.Server.Auth.OIDC
	if o == nil {
		return nil
	}
	log.Info("sign-in with an OpenID provider", "issuer", o.Issuer, "client_id", o.ClientID, "allowed_groups", o.AllowedGroups)
	return oidc.NewLazy(*o, log)
}
