// SPDX-License-Identifier: Apache-2.0
module v6node.invalid/e2e-server

go 1.24
