"""Tests of autobatch_vm.ir."""
