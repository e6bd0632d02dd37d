// Package store is gpuvmd's database: gorm models, versioned migrations, and
// small repositories the handlers, the scheduler, the worker and the
// reconciler call. SQLite (one server, the default) and PostgreSQL (several
// servers sharing one database) behave the same; the tests run against both.
//
// # Opening
//
// Open connects, migrates the schema up (migrate.go) and refuses a database
// migrated by a newer gpuvmd (ErrSchemaTooNew). SQLite runs on one connection
// in WAL mode with a busy timeout, foreign keys on and IMMEDIATE transactions:
// writers queue in Go rather than fail with "database is locked", and other
// processes reading the file are waited for. PostgreSQL gets a pool of
// MaxOpenConns connections. gorm's log goes to slog: failed statements at
// error (expected failures, such as a taken slot, at debug), statements slower
// than SlowThreshold at warn, never with their parameters.
//
// # Conventions
//
// Every method takes a context and passes it to gorm. Errors wrap ErrNotFound,
// ErrConflict (ErrNameTaken, ErrIdempotencyKeyUsed), ErrSlotTaken,
// ErrInvalid, ErrInvalidToken or ErrSchemaTooNew with what was being done;
// test them with errors.Is. Times are stored in UTC with microsecond
// precision, from Config.Now. Rows that change under concurrent writers (VMs,
// reservations) carry a version, and updates name the version they read.
// Tx runs several calls in one transaction; a method that fails inside it
// undoes only its own writes (a savepoint). A transaction that only inserts
// (a create) is pipelined on PostgreSQL: its INSERTs go as one batch, one
// round trip, one implicit transaction (pipeline.go).
//
// # The slot invariant
//
// Two live allocations of one part of a GPU are impossible at the database
// level: each live allocation writes one allocation_slots row per unit it
// occupies (a MIG memory slice, a vGPU VF or index, the whole GPU) under a
// primary key on (host, gpu_address, slot_key), and a gpu_modes row keeps a
// GPU in one mode while it has live slots. See SlotClaim and ClaimAllocation.
package store
