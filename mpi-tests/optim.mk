# tests of optim
