// SPDX-License-Identifier: MIT
// Sends ETH onward through internal calls, as exchange hot wallets do, so
// tests can check that a watcher sees (or rightly ignores) internal
// transfers. Test-only: used by chains/testkit (anvil harness).
pragma solidity ^0.8.20;

contract Forwarder {
    /// Pays all of msg.value to `to` through an internal call.
    function forward(address payable to) external payable {
        (bool ok, ) = to.call{value: msg.value}("");
        require(ok, "forward failed");
    }

    /// Pays half of msg.value to `a` and the rest to `b`, two internal calls.
    function split(address payable a, address payable b) external payable {
        uint256 half = msg.value / 2;
        (bool okA, ) = a.call{value: half}("");
        require(okA, "split a failed");
        (bool okB, ) = b.call{value: msg.value - half}("");
        require(okB, "split b failed");
    }

    /// Forwards msg.value to `to`, then reverts: the internal transfer is
    /// undone with the whole transaction and must not count as a payment.
    function forwardThenRevert(address payable to) external payable {
        (bool ok, ) = to.call{value: msg.value}("");
        require(ok, "forward failed");
        revert("forwardThenRevert");
    }
}
