"""Tests of autobatch_vm.backends."""
