"""Sentence and question templates written afresh for the generator-swap check: the same
conversational moves as bench/suites/phrases.py (same constant names, same placeholders), in other
words. Placeholders: {name}, {dept}, {area}, {title}, {item}, {amount}, {event}, {date}, {metric},
{value}, {task}, {gerund}, {subject}, {a}, {b}, {proposal}, {old}, {new}, {np}, and the agreement
forms {is}, {comes}, {costs} that follow {item}. No digits: numbers only come from placeholders."""

from __future__ import annotations

OPENINGS = (
    "Morning, all. We're here to sort out {title}.",
    "Alright, let's start. Just one item today: {title}.",
    "Thanks for coming, everybody. We need to go over {title}.",
    "Okay, settle down, folks, let's get going on {title}.",
    "Welcome, everybody. Today's session covers {title}.",
    "So, the reason I pulled this group together is {title}.",
    "Evening, folks. Let's pick up where we left off with {title}.",
    "Hello and welcome. One big subject today: {title}.",
    "Let's dive in. Today's focus is {title}.",
)

INTROS = (
    "I'm {name}, for anyone I haven't met.", "Quick intro: {name}, from {dept}.",
    "Hello, my name's {name}, I'm with {dept}.", "Hi, I'm {name}, I head up {area}.",
    "Hey everyone, {name} here. I'm responsible for {area}.", "I'm {name}; I manage {area}.",
    "Name's {name}, and I sit in {dept}.", "I'm {name}, I joined {dept} not long ago.",
    "Hiya, {name} here, I keep {area} running.",
    "I'm {name}, you'll know me from {dept}.",
)
INTRO_ROUND = ("Not everyone has met, so quick introductions.",
               "Could everyone say their name and role?",
               "Quick round first, please: names and teams.")

ADDRESS_PROMPTS = (
    "{name}, how's your end looking?", "Your turn, {name}.", "{name}, fill us in.",
    "And {name}, what's new with you?", "{name}, you had something on this?", "Let's go to {name} next.",
    "{name}, bring us up to speed.", "Can we get your update, {name}?", "{name}, the floor is yours.",
)
NUMBERS_PROMPTS = ("{name}, do you have the figures handy?", "{name}, what are the numbers telling us?",
                   "{name}, talk us through the figures.", "{name}, you crunched the numbers, didn't you?")
PLAIN_PROMPTS = ("Who's got news?", "How's it coming along?", "What's the picture?",
                 "Who'll kick us off?", "Does someone have the figures?", "What have we got?",
                 "Can somebody fill us in?")
THANKS_NAMED = ("Cheers, {name}.", "Appreciate it, {name}.", "Nice one, {name}.",
                "Thanks a lot, {name}.", "Lovely, thanks for that, {name}.")
THANKS_PLAIN = ("Cheers.", "Much appreciated.", "Okay, noted.", "Perfect, that's all I needed.", "Lovely, that helps.",
                "Understood.")
OTHERS_PROMPTS = ("Does anybody else want to weigh in?", "How does everyone else feel about it?",
                  "Anyone see it differently?")
AGREE = "Same here."  # when a speaker asked for an opinion has no filler left
OPINION_PROMPTS = ("{name}, how do you see it?", "{name}, are you happy with that?", "{name}, anything to add?",
                   "What's your take, {name}?")

BACKCHANNELS = ("Yep.", "Totally.", "Aha.", "Fair enough.", "Exactly.", "Makes sense.", "Yes, indeed.",
                "Noted.", "Hmm, yes.", "Absolutely.")

AMOUNT = (
    "The quote we got back puts the {item} at {amount}.", "Price-wise, the {item} {comes} in at {amount}.",
    "We're looking at {amount} for the {item}.", "I've pencilled in {amount} for the {item}.",
    "The supplier wants {amount} for the {item}.", "All in, the {item} {is} {amount}.",
    "If we go ahead, the {item} would set us back {amount}.", "We've been quoted {amount} for the {item}.",
    "So, the {item}: that's {amount}, tax included.",
    "Money-wise, {amount} is the figure for the {item}.",
)
HOW_MUCH_Q = (
    "What {is} the {item} going to cost them?", "How much are they paying for the {item}?",
    "What figure was given for the {item}?", "What amount went into the budget for the {item}?",
    "What price {is} the {item} coming in at?", "Remind me what the {item} {costs}?",
    "What's the dollar figure on the {item}?", "How expensive {is} the {item}?",
)

EVENT = (
    "Put {date} in your diaries for the {event}.", "The {event} has been booked for {date}.",
    "We've landed on {date} for the {event}.", "Heads up, {date} is when the {event} happens.",
    "The {event}, that's going to be {date}.", "Diary note: the {event} falls on {date}.",
    "Confirmed now: the {event} goes ahead on {date}.",
)
WHEN_Q = ("What date did they give for the {event}?", "Which day has the {event} been set for?",
          "When does the {event} happen?", "Which day is pencilled in for the {event}?",
          "When are they holding the {event}?", "On which day does the {event} fall?")

MOVE_OLD = ("The {event} was pencilled in for {old}, but that won't work.",
            "The {event} is down for {old}, and we can't make that.",
            "Problem with the {event}: it's on {old}, and we won't be ready.",
            "Our first slot for the {event} was {old}, but that clashes now.")
MOVE_DECIDE = ("Right, we'll push the {event} back to {new} then.", "Okay, {new} becomes the new date for the {event}.",
               "So the {event} gets rescheduled to {new}.", "Agreed, the {event} now happens on {new} instead.",
               "Fine, {new} it is for the {event}.")
DECIDED_MOVE_Q = ("What happened with the date of the {event}?", "How did they change the plan for the {event}?",
                  "What's the outcome on the timing of the {event}?",
                  "What did the group agree to do with the {event}?")
WHEN_NOW_Q = ("After the reschedule, when is the {event}?", "Which day is the {event} on following the change?",
              "When does the {event} take place now that it's been moved?", "Where has the {event} landed in the calendar now?")

METRIC = (
    "The {metric} currently stands at {value}.", "Newest number on the {metric}: {value}.",
    "I pulled the {metric} this morning and it's {value}.", "On the {metric}, we're sitting at {value}.",
    "The {metric} has come out at {value}.", "This week the {metric} reads {value}.",
    "Checking the {metric}, I get {value}.", "The report puts the {metric} at {value}.",
)
METRIC_PREVIOUS = (" The previous reading was {old}.", " Before that we had {old}.",
                   " It was {old} the time before.", " Previously: {old}.")
METRIC_Q = ("What figure did they give for the {metric}?", "At what level is the {metric} sitting these days?",
            "What's the latest reading on the {metric}?", "What value was reported for the {metric}?",
            "Where does the {metric} stand now?", "What number did the meeting give for the {metric}?")

CHOICE_OPTIONS = ("{subject} needs settling: {a} or {b}.",
                  "For {subject}, we're torn between {a} and {b}.",
                  "{subject} is still open: it's either {a} or {b}.",
                  "For {subject}, the shortlist is {a} and {b}.")
CHOICE_VENDOR_OPTIONS = ("We've had bids for {subject} from {a} and from {b}.",
                         "Two companies quoted for {subject}: {a} and {b}.",
                         "Both {a} and {b} have pitched for {subject}.")
CHOICE_OPINION = ("I'd lean towards {b}, to be honest.", "{a} would save a bit, but I trust {b} more.",
                  "{a} did the job last time, but {b} would be safer.", "My vote would be {b}.",
                  "I rate {b} above {a}.",
                  "I could live with {a}, though I'd pick {b}.")
CHOICE_DECIDE = ("Alright, the winner is {b}.", "So that's agreed: for {subject}, it's {b}.",
                 "Decision made: {b} for {subject}.", "{b} then. Let's lock that in.",
                 "Our final answer on {subject} is {b}.", "Let's settle on {b}.",
                 "Good, {b} for {subject}, then.")
DECIDED_Q = ("Which way did they go on {subject}?", "What did they settle on for {subject}?",
             "What was chosen as {subject}?", "Where did they land on {subject}?",
             "What's the final call on {subject}?")

PROPOSE = ("Could we maybe {proposal}?", "Here's a thought: we could {proposal}.",
           "Is there any appetite to {proposal}?", "Proposal: we {proposal}.",
           "Would it make sense to {proposal}?", "One idea: why don't we {proposal}?")
ACCEPT = ("Yes, agreed, we'll {proposal}.", "Happy with that. Let's go ahead and {proposal}.",
          "Absolutely, let's make it happen.", "Agreed. Consider it done.",
          "Yes, go for it. We'll {proposal}.", "That makes sense. Okay, we'll do that.")
REJECT = ("I'd rather we didn't {proposal}. Too costly.", "No, we won't {proposal}, not this year.",
          "That's a no from me, we're stretched thin.",
          "Let's hold off; we won't {proposal} yet.",
          "I'm against it. We shouldn't {proposal}.", "No. Not a good time for that.")
YES_NO_Q = ("Was the decision made to {proposal}?", "Did the idea to {proposal} get approved?",
            "Is the group going ahead with the plan to {proposal}?", "Has the team decided it will {proposal}?",
            "In the end, do they {proposal} or not?", "Did the meeting approve the idea to {proposal}?")

SELF_ACTION = ("Leave it with me, I'll {task} by {date}.", "I'll take that one and {task} before {date}.",
               "Put me down to {task}, done by {date}.", "Count on me to {task} by {date}.",
               "My action, then: {task}, finished by {date}.", "I'm on it, I'll {task} by {date} at the latest.")
ASSIGN = ("{name}, over to you: {task} by {date}, please.", "{name}, are you able to {task} before {date}?",
          "{name}, this one is yours: {task}, due {date}.",
          "{name}, I'm putting you down to {task} by {date}.",
          "{name}, any chance you could {task} by {date}?")
ASSIGN_REPLY = ("Yep, leave it with me.", "Happy to.", "Will do.", "Of course, consider it done.",
                "Sure thing, that's doable.", "Yes, I'll get it sorted by then.")
VOLUNTEER_ASK = ("Any volunteers to {task}?", "Who's free to {task}?", "Someone needs to {task}. Any takers?",
                 "Is anyone able to {task}?")
VOLUNTEER = ("Put my name down. I'll {task} by {date}.",
             "Happy to {task}. Done by {date}.",
             "I've got time. I'll {task} before {date}.", "Go on then, I'll {task}. Expect it by {date}.")
WHO_WILL_Q = ("Who has been given the job of {gerund}?", "Which of them is in charge of {gerund}?",
              "Who is handling {gerund}?", "Who owns the task of {gerund}?", "Whose job is it to {task}?",
              "Who ended up stuck with {gerund}?", "Who's on the hook to {task}?")
DUE_Q = ("When does {gerund} have to be finished?", "What date is {gerund} due?",
         "What's the due date to {task}?", "By what day is someone supposed to {task}?",
         "When is {gerund} expected to be done?")

NEXT_MEETING_Q = ("When do they get together next?", "What's the date of their next catch-up?",
                  "On what day is the follow-up meeting?", "When's the group's next meeting?")
NEXT_MEETING = ("We'll reconvene on {date}.", "Same time again on {date}, everyone.",
                "Let's pick this up again on {date}.", "Next catch-up will be {date}.")

WHO_SAID_Q = ("Who was it that shared {np}?", "Which attendee provided {np}?", "Who filled everyone in on {np}?",
              "Whose update included {np}?", "Who was the source for {np}?", "Who spoke about {np}?")
WHO_PROPOSED_Q = ("Who came up with the idea to {proposal}?", "Who put forward the idea that they {proposal}?",
                  "Which person floated the suggestion to {proposal}?", "Who raised the idea to {proposal}?")

ABSENT_AMOUNT_Q = ("How much did they budget for the {item}?", "What price {is} the {item}?",
                   "How much money goes to the {item}?", "What {is} the {item} expected to cost?",
                   "How pricey {is} the {item}?")
ABSENT_WHEN_Q = ("What day is the {event} happening?", "When have they scheduled the {event}?",
                 "Which date was picked for the {event}?")
ABSENT_WHO_Q = ("Who will take care of {gerund}?", "Who has to {task}?", "Who's been asked to {task}?")
ABSENT_METRIC_Q = ("What's the {metric} at the moment?", "What number did they give for the {metric}?",
                   "What level has the {metric} reached?")
# Figures never given for things the meeting does talk about (a date said, no price): a made-up answer
# would lift another line's amount.
FIGURE_NOT_SAID_EVENT_Q = ("What's the cost of the {event}?", "How much money is going into the {event}?",
                           "What will they spend on the {event}?", "How much has been budgeted for the {event}?")
FIGURE_NOT_SAID_TASK_Q = ("How big is the bill for {gerund}?", "How much are they spending on {gerund}?",
                          "What's the price tag for {gerund}?", "How much budget is there to {task}?")

CLOSING_REPLIES = ("Cheers, bye.", "Take care, everyone.", "See you next time.")
CLOSINGS = ("Okay, let's wrap up there.", "That's my list done. Cheers, everyone.",
            "Let's call it a day. Thank you.", "Good, we're done. Thanks for coming.",
            "Okay, back to work, everyone.", "Productive session, thank you all.")
# Remarks a speaker can add to their own turn or say on their own; reactions only stand alone.
GENERIC_REMARKS = (
    "Honestly, it's been a hectic few weeks.", "We'll want to revisit this before too long.",
    "I'll flag that in the notes so it doesn't get lost.",
    "A couple of colleagues I asked were on board.",
    "It's shaping up nicely, all things considered.", "The timing is tight, but I think we can manage.",
    "Let's make sure the wider team hears about this.",
    "Expect a few surprises, so let's stay flexible.",
    "I'm fairly relaxed about it, to be honest.", "We can always pick that up again if something changes.",
)
REACTIONS = (
    "Yes, I can see that.", "Fair enough, I hadn't thought of it that way.", "The same thought crossed my mind.",
    "Good point, well made.", "Well, that's a relief.", "Hmm, let me mull that over. Okay, yes, I'm fine with it.",
    "Huh, that surprises me a little.", "Right, that seems sensible.", "I'm comfortable with that.",
)
