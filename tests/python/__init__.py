"""Tests of autobatch_vm.python."""
