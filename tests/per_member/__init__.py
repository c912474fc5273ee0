"""Tests of autobatch_vm.per_member."""
