"""Sentence and question templates for the "unseen" vocabulary: the same conversational moves as
bench/suites/phrases.py (same constant names, same placeholders), phrased a third way, without
reading the answering code. Placeholders: {name}, {dept}, {area}, {title}, {item}, {amount},
{event}, {date}, {metric}, {value}, {task}, {gerund}, {subject}, {a}, {b}, {proposal}, {old},
{new}, {np}, and the agreement forms {is}, {comes}, {costs} that follow {item}. No digits."""

from __future__ import annotations

OPENINGS = (
    "Right, shall we make a start? We're here to dig into {title}.",
    "Hi everyone, let's kick off. Top of the list is {title}.",
    "Okay, folks, the main thing on the agenda today is {title}.",
    "Thanks for making the time. I'd like us to focus on {title}.",
    "Let's get going. I pulled us together to discuss {title}.",
    "Hey, all. So, today's topic is {title}.",
    "Hello, everybody. We're picking up the thread on {title}.",
    "Good to see everyone. Let's work our way through {title}.",
    "Alright, people, we've got {title} to get through today.",
)

INTROS = (
    "I'm {name}, by the way, from {dept}.", "Hello, I'm {name}. I'm part of {dept}.",
    "It's {name} from {dept}, hi.", "I'm {name}; {area} is my responsibility.",
    "Nice to meet everyone. I'm {name}, {dept}.", "I'm {name}. I've just moved over to {area}.",
    "Hello, this is {name}, I coordinate {area}.", "I'm {name}, I oversee {area}.",
    "Oh, and I'm {name}.", "My name's {name}; I'm over in {dept}.",
)
INTRO_ROUND = ("Let's start by going round and saying who we are.", "Some of you haven't met, so names first.",
               "Quick hellos first, please.")

ADDRESS_PROMPTS = (
    "{name}, what's the latest?", "{name}, how are things on your side?", "{name}, want to go next?",
    "{name}, I think you're up.", "{name}, catch us up.", "{name}, you wanted to raise something?",
    "{name}, tell us where things are.", "Anything new, {name}?", "{name}, you've got news, I think?",
)
NUMBERS_PROMPTS = ("{name}, you've seen the numbers?", "{name}, what does the spreadsheet say?",
                   "{name}, any figures for us?")
PLAIN_PROMPTS = ("What's the news?", "Who can tell us more?", "Who's got something for us?", "How's that going?",
                 "Has anyone got the details?", "So what do we know?", "Who's been looking into it?")
THANKS_NAMED = ("Helpful as always, {name}, thanks.", "Thank you kindly, {name}.", "Good stuff, {name}. Thanks.",
                "Thanks ever so much, {name}.", "Much obliged, {name}.")
THANKS_PLAIN = ("Brilliant.", "That's useful, thanks.", "Right, good stuff.", "Super, thanks for that.", "Excellent.",
                "Okay, that works.")
OTHERS_PROMPTS = ("What does everyone else reckon?", "Does anyone else have a view?", "Other opinions?")
AGREE = "Works for me."  # when a speaker asked for an opinion has no filler left
OPINION_PROMPTS = ("{name}, where do you stand on this?", "{name}, do you buy that?", "Your view, {name}?")

BACKCHANNELS = ("Alright.", "Yes.", "Sure, sure.", "Ah, okay.", "Right, right.", "Gotcha.", "Oh, okay.",
                "Okay, yeah.", "Hmm.", "I hear you.")

AMOUNT = (
    "The {item} {is} costing us {amount}.", "We've earmarked {amount} for the {item}.",
    "The {item} will run us {amount}, give or take.", "I've had a figure through for the {item}: {amount}.",
    "Looks like the {item} {comes} out at {amount}.", "On the {item}, we're talking {amount}.",
    "{amount} is what the {item} {costs}.", "For the {item} we need {amount}.",
    "My understanding is that the {item} {is} {amount}.", "The estimate I was sent for the {item} says {amount}.",
)
HOW_MUCH_Q = (
    "Any idea what they're forking out for the {item}?", "How much money is going on the {item}?",
    "Do you know what they're spending on the {item}?", "What number did they put on the {item}?",
    "What amount is earmarked for the {item}?", "I missed the money part, how much {is} the {item}?",
    "what {is} the {item} costing?", "How much are we looking at for the {item}?",
)

EVENT = (
    "For the {event}, we've gone with {date}.", "{date} is the day for the {event}.", "Mark your calendars: the {event} is {date}.",
    "The {event} is locked in for {date}.", "The {event} goes in the calendar for {date}.",
    "It's {date} for the {event}; that's confirmed.", "All being well, the {event} is {date}.",
)
WHEN_Q = ("When's the {event} set for?", "Do you know when the {event} is?",
          "What day should I put in my calendar for the {event}?", "When did they say the {event} would be?",
          "The {event}, when is it?", "On which date will the {event} be held?")

MOVE_OLD = ("The {event} was down for {old}; that won't fly now.",
            "The {event} sits on {old}, too soon for us.",
            "The {event} was meant to be {old}, but we've hit a snag.",
            "The {event} is on {old} for now, which no longer suits.")
MOVE_DECIDE = ("Let's give the {event} a new date: {new}.", "Agreed then, the {event} is now on {new}.",
               "We'll push the {event} out to {new}.", "So, new plan: the {event} on {new}.",
               "The {event} will now be {new} instead.")
DECIDED_MOVE_Q = ("What was the outcome for the {event}?", "What's happening with the {event} now?",
                  "Where did they leave things with the {event}?", "Any change to the plans for the {event}? What was agreed?")
WHEN_NOW_Q = ("The {event} got moved, right? To when?", "After all the back and forth, what day is the {event} now?",
              "What day did the {event} get moved to?", "When did they reschedule the {event} for?")

METRIC = (
    "Last I looked, the {metric} was {value}.", "The numbers show the {metric} at {value}.",
    "The {metric} now sits at {value}.", "These days the {metric} hovers around {value}.",
    "Per the tracker, the {metric} is {value}.", "{value}, that's where the {metric} is now.",
    "We've got the {metric} at {value}.", "For the {metric}, I've got {value}.",
)
METRIC_PREVIOUS = (" Not long ago it was {old}.", " At the last check we had {old}.",
                   " The earlier number was {old}.", " It was {old} last time round.")
METRIC_Q = ("What's the {metric} looking like?", "Do you know the latest {metric}?",
            "How's the {metric} doing, what's the figure?", "Where did the {metric} land?",
            "What was the {metric} they mentioned?", "Can you tell me the {metric}?")

CHOICE_OPTIONS = ("Next, {subject}: the contenders are {a} and {b}.",
                  "For {subject} we've narrowed it down to {a} and {b}.",
                  "Still to decide: {subject}, {a} or {b}.",
                  "{subject} is a two horse race: {a} against {b}.")
CHOICE_VENDOR_OPTIONS = ("{a} and {b} both sent in quotes for {subject}.",
                         "We've got proposals on {subject} from two firms, {a} and {b}.",
                         "For {subject}, it's down to two companies: {a} or {b}.")
CHOICE_OPINION = ("Honestly, {b} gets my vote.", "I've nothing against {a}, but I'd rather have {b}.",
                  "From what I've seen, I'd back {b}.", "I keep coming back to {b}.",
                  "If it were up to me, I'd pick {b} over {a}.", "We could do {a}, but my money's on {b}.",
                  "I've had good experiences with {b}.")
CHOICE_DECIDE = ("Right, we're going with {b}.", "Let's make it {b}, then.", "So we'll go for {b} on {subject}.",
                 "Agreed, we'll pick {b} for {subject}.", "Sold. We'll take {b}.", "I'm calling it: {b}.")
DECIDED_Q = ("What was picked for {subject} in the end?", "Did they make a call on {subject}? What was it?",
             "What did they end up choosing for {subject}?", "So what's the verdict on {subject}?",
             "What did they go with for {subject}?")

PROPOSE = ("What if we {proposal}?", "Would anyone object if we {proposal}?", "Why not {proposal}?",
           "Ought we to {proposal}?", "Wouldn't it be wise to {proposal}?")
ACCEPT = ("Fine by me, we'll {proposal}.", "Yes, let's go ahead with that.", "All for it; let's {proposal}.",
          "Sensible. Let's do it.", "Okay, we'll {proposal}. Decision made.",
          "Yes. Go ahead and {proposal}.")
REJECT = ("I don't think so. We can't afford to {proposal}.", "Not this time, I'm afraid. We won't {proposal}.",
          "Let's park that. Not right now.", "No, the timing is wrong for that.",
          "Honestly, no. It's not worth the hassle.")
YES_NO_Q = ("So are we going to {proposal} or not?", "Did anyone sign off on the suggestion to {proposal}?",
            "Was the suggestion to {proposal} accepted?", "Have they agreed that they'll {proposal}?",
            "Did the plan to {proposal} get the green light?", "Did they say yes to the plan to {proposal}?")

SELF_ACTION = ("I'll make sure I {task} by {date}.", "Action on me: I'll {task} by {date}.",
               "I've got one to add: I'll {task} by {date}.", "Something for my list: I'll {task} by {date}.",
               "Before {date}, I'll {task}.", "I'll {task}; expect that done by {date}.")
ASSIGN = ("{name}, can I leave you to {task} by {date}?",
          "{name}, mind taking this? {task} by {date}.",
          "{name}, {task} by {date}, if you can.", "Could I ask you, {name}, to {task} by {date}?",
          "{name}, please {task}, and aim for {date}.")
ASSIGN_REPLY = ("No problem at all.", "Yep, I'm on it.", "Sure, that's fine with me.", "Absolutely, I'll handle it.",
                "Okay, you can rely on me.")
VOLUNTEER_ASK = ("Can anybody {task}?", "Anyone keen to {task}?", "Could somebody {task}?",
                 "Does someone have the bandwidth to {task}?")
VOLUNTEER = ("I've got capacity. I'll {task} by {date}.", "I can pick that up. I'll {task} by {date}.",
             "I'll grab that. I'll {task} by {date}.",
             "Put that on my list. I'll {task} by {date}.")
WHO_WILL_Q = ("Who said they'd {task}?", "Whose name is next to {gerund}?", "Who's {gerund}?",
              "Who was tasked with {gerund}?", "Who got assigned to {task}?", "Do we know who'll {task}?",
              "Who's meant to {task}?")
DUE_Q = ("When does {gerund} need to be done by?", "What's the target date for {gerund}?",
         "When did they promise to {task} by?", "When's {gerund} due?", "What date was set to {task}?")

NEXT_MEETING_Q = ("When are they meeting up again?", "What day is the group next getting together?",
                  "When's the next session booked for?", "Is there another meeting planned, and on what date?")
NEXT_MEETING = ("Let's regroup on {date}, then.", "Next get-together: {date}.",
                "Our next check-in will be {date}.", "See you all again on {date}.")

WHO_SAID_Q = ("Which speaker had {np}?", "Who was the one who told everyone {np}?", "Who relayed {np}?",
              "From whom did we hear {np}?", "Who came in with {np}?", "Who had the info on {np}?")
WHO_PROPOSED_Q = ("Who first raised the possibility that they could {proposal}?", "Who was pushing to {proposal}?",
                  "Who was the first to suggest they {proposal}?",
                  "Where did the idea to {proposal} come from, who said it?")

ABSENT_AMOUNT_Q = ("How much was allocated to the {item}?", "Any figure on what the {item} {costs}?",
                   "Any idea how much they're putting into the {item}?", "What sort of money are they spending on the {item}?")
ABSENT_WHEN_Q = ("When is the {event} planned for?", "What date did they set for the {event}?",
                 "When's the {event} going ahead?")
ABSENT_WHO_Q = ("Who did they pick for {gerund}?", "Who is looking after {gerund}?", "Who got the job of {gerund}?")
ABSENT_METRIC_Q = ("What's the current reading for the {metric}?",
                   "Do they have a number for the {metric}? What is it?", "What's the {metric} figure these days?")
# Figures never given for things the meeting does talk about (a date said, no price): a made-up answer
# would lift another line's amount.
FIGURE_NOT_SAID_EVENT_Q = ("What's the {event} going to cost?", "How many dollars are going to the {event}?",
                           "Did they set aside money for the {event}, and how much?")
FIGURE_NOT_SAID_TASK_Q = ("How much will {gerund} cost them?", "What will they pay for {gerund}?",
                          "How much are they paying to {task}?")

CLOSING_REPLIES = ("Thanks, all.", "Have a good one.", "Bye for now.", "Thanks, catch you later.")
CLOSINGS = ("Right, I think we're done.", "That's everything on my list. Thanks, all.",
            "Let's leave it there for today.", "Great work today, everybody.", "We'll stop there. Cheers, all.",
            "Back to it, all. Thanks.")
# Remarks a speaker can add to their own turn or say on their own; reactions only stand alone.
GENERIC_REMARKS = (
    "We've come a long way since we began.", "I'd like us to keep the momentum going.",
    "Let's not lose sight of what really matters.", "It's been one of those weeks, honestly.",
    "I'll make sure that's written up somewhere.",
    "I had a chat with a couple of people and they agree with us.",
    "There's still a lot to do, but we're getting there.",
    "Nothing's set in stone, so we can adjust if we need to.",
    "We should keep everyone else in the loop on this.", "Fingers crossed it all holds together.",
)
REACTIONS = (
    "Yeah, I'm with you there.", "Good call.", "I was wondering about that too.", "That's reassuring to hear.",
    "Oh, really? I wouldn't have guessed.", "Sure, that seems fine to me.", "Okay, I'm fine with that.",
    "Hmm. Give me a second. Alright, yes, that works.", "That's a good way to look at it.",
)
