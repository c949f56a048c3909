package store

// approvalSchema holds approval requests (version 3).
const approvalSchema = `
`
