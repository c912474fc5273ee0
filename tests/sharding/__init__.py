"""Tests of autobatch_vm.sharding."""
