package store

// toolCallSchema holds tool calls for replay protection and quarantine
// (version 3).
const toolCallSchema = `
`
