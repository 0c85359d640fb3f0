# tests of store
