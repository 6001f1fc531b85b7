// Package cache is tensorbridge's compile cache: compiled executables kept
// in memory and, for backends that can serialize them, on disk, so neither a
// repeated compile nor a restarted process pays for compilation again.
//
// It knows no backend: values are any type V, and the backend supplies the
// compile function and, for the disk, the serialized bytes. The runtime
// keeps a Memory per model and hands the Disk to the backend, which reads
// it before compiling and writes it after (see Example):
//
//	mem, err := cache.NewMemory(cache.MemoryOptions[*Exe]{MaxBytes: 4 << 30,
//		Timeout: 5 * time.Minute, Release: func(_ string, e *Exe) { e.Free() }})
//	exe, done, err := mem.GetOrCompile(ctx, key.Digest(), compile)
//	defer done()
//
// where compile tries disk.Get(ctx, key) first and, after a real compile,
// calls disk.Put(ctx, key, serialized, compileTime).
//
// # Levels
//
// Memory is an LRU bounded by entry count and by bytes. Concurrent callers
// of one key share one compile (the lock is never held while compiling);
// a caller whose context ends stops waiting and the compile goes on for the
// others; a failed compile is not kept. Values are reference-counted, so an
// evicted executable is freed only when its last user is done with it.
// Timeout bounds each caller's wait and returns *errs.CompileTimeoutError.
//
// Disk is a directory of entry files, <key digest>.tbc, each with a magic
// number, a version, a JSON header (the key's description, the compile
// time) and the payload, with a SHA-256 checksum of the header and a CRC-32C of the payload.
// Writes go to a temporary file in the directory, are synced and renamed
// into place, so a reader never sees half an entry. A corrupt entry
// (truncated, flipped bits, garbage) fails validation, is removed, reported
// and counted, and the key is compiled again. A size cap evicts the least
// recently used entries (a hit updates the file's modification time).
//
// # Keys
//
// Key covers what changes the compiled result: the program, a digest of the
// weights folded into it, input dtypes and shapes, compile options, backend,
// plugin and its version, device kind and topology. Key.Digest is a SHA-256
// of a length-prefixed encoding, so every field matters and no two keys
// collide by concatenation. This fixes two faults of earlier designs: a key
// built from a model's printed architecture (different weights shared one
// executable) and a key missing the plugin version (an upgrade loaded stale
// code).
//
// # Statistics
//
// Memory.Stats and Disk.Stats count hits, misses, corrupt entries,
// evictions, the compile time spent and the compile time saved (each entry
// records how long its compile took). Disk.FlushStats adds a process's disk counts to
// the directory's stats.json; Command implements `tensorbridge cache ls`,
// `stats` and `clear` on a directory.
package cache
