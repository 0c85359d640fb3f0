# tests of plan
