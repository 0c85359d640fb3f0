# tests of train
