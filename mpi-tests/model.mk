# tests of model
