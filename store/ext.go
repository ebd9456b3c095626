package store

import (
	"errors"
	"io"
)

// Ext returns the value db keeps under key, made by newFunc on the first call
// with that key. A package that keeps in-process state per database (queue's
// wake-up signals, declared names and prepared statements) keeps it here,
// under an unexported key type of its own, instead of in a package-level map:
// the state then lives exactly as long as the database. Close drops every
// value, first closing those that are io.Closers.
//
// Lookups take no lock. Two first calls racing may both run newFunc; one
// value is kept and the other, if an io.Closer, is closed.
func (db *DB) Ext(key any, newFunc func() any) any {
	if v, ok := db.ext.Load(key); ok {
		return v
	}
	made := newFunc()
	v, loaded := db.ext.LoadOrStore(key, made)
	if c, ok := made.(io.Closer); ok && loaded {
		_ = c.Close()
	}
	return v
}

// closeExt drops every value kept by Ext, closing the io.Closers.
func (db *DB) closeExt() error {
	var errs []error
	db.ext.Range(func(key, v any) bool {
		db.ext.Delete(key)
		if c, ok := v.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
		return true
	})
	return errors.Join(errs...)
}
